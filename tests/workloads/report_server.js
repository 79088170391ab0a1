// A Node.js HTTP server (the standard library's `http`) whose /report serializes a large in-memory
// array on the event loop: JSON.stringify runs in V8's C++ for ~100 ms while /ping waits behind it.
// Usage: node report_server.js ROWS   (ROWS 0: /report answers a string made at start, the control)
// Prints "port N" and "ready"; serves until killed.
const http = require("http");

const rows = Number(process.argv[2] || 0);
const book = [];
for (let i = 0; i < rows; i++) book.push({ id: i, name: "item" + i, tags: ["a", "b", "c"], price: i * 1.5 });
const made = JSON.stringify({ rows: 0 });

function renderReport() {
  return rows ? JSON.stringify(book) : made;
}

http
  .createServer((req, res) => {
    if (req.url === "/report") {
      const body = renderReport();
      res.end(String(body.length));
    } else {
      res.end("pong");
    }
  })
  .listen(0, "127.0.0.1", function () {
    console.log("port " + this.address().port);
    console.log("ready");
  });
