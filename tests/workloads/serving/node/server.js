// Express server whose one JavaScript thread (the process's main thread) is kept busy by
// one slow request.
//
//   node server.js [--port 0] [--target 0.2]
//
// GET /ping answers "ok"; GET /report renders a large JSON report synchronously in the
// handler (renderReport: one JSON.stringify call of about TARGET seconds), so every other
// request waits behind it. Prints "port <port>", "rows <n> <seconds of one render>",
// "tid main <TID of the main thread, which is the PID>", then "ready".
"use strict";
const express = require("express");

function arg(name, dflt) {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
}

function makeRows(n) {
  const rows = new Array(n);
  for (let i = 0; i < n; i++) {
    rows[i] = {
      id: i,
      sku: "SKU-" + String(i).padStart(8, "0"),
      name: "item number " + i,
      price: i * 1.37 + 0.01,
      qty: i % 97,
      ratio: i / 7,
      tags: ["alpha", "beta", "gamma"],
      active: i % 2 === 0,
    };
  }
  return rows;
}

function stringifySeconds(rows) {
  const times = [];
  for (let k = 0; k < 3; k++) {
    const t = process.hrtime.bigint();
    JSON.stringify(rows);
    times.push(Number(process.hrtime.bigint() - t) / 1e9);
  }
  return times.sort((a, b) => a - b)[1];
}

// rows whose JSON.stringify takes about `target` seconds here, and that time
function calibrate(target) {
  let n = 50000, rows, took;
  for (let k = 0; k < 4; k++) {
    rows = makeRows(n);
    took = stringifySeconds(rows);
    if (took / target > 0.8 && took / target < 1.25) break;
    n = Math.max(1000, Math.floor((n * target) / took));
  }
  return [rows, took];
}

const [ROWS, took] = calibrate(arg("--target", 0.2));
console.log(`rows ${ROWS.length} ${took.toFixed(3)}`);

function renderReport() {
  return JSON.stringify(ROWS);
}

const app = express();
app.get("/ping", (req, res) => {
  res.type("text/plain").send("ok\n");
});
app.get("/report", (req, res) => {
  const body = renderReport();
  res.type("application/json").send(body);
});

const server = app.listen(arg("--port", 0), "127.0.0.1", () => {
  console.log(`port ${server.address().port}`);
  console.log(`tid main ${process.pid}`);
  console.log("ready");
});
