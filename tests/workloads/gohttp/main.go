// A Go net/http service (the standard library only) and its load client, for the tests.
//
//	gohttp serve PORT            a service whose handler hashes 64 KiB with SHA-256 `work` times
//	                             (?work=N, default 8: about 0.3 ms of CPU); prints "ready"
//	gohttp load PORT CONC SECS   CONC clients in a closed loop for SECS seconds; prints one JSON
//	                             line: requests, per second, and latency p50/p99/max in seconds
//
// The runtime's own account of its scheduler is the ground truth of what its threads did
// (GODEBUG=schedtrace=1000 prints idle Ps, spinning and idle Ms each second).
package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"
)

var block = make([]byte, 64<<10)

func handler(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.URL.Query().Get("work"))
	if err != nil || n <= 0 {
		n = 8
	}
	var sum [32]byte
	for i := 0; i < n; i++ {
		sum = sha256.Sum256(append(block[:len(block)-32], sum[:]...))
	}
	fmt.Fprintf(w, "%x\n", sum[:4])
}

func serve(port string) {
	http.HandleFunc("/", handler)
	ln := "127.0.0.1:" + port
	srv := &http.Server{Addr: ln}
	go func() {
		time.Sleep(200 * time.Millisecond)
		fmt.Println("ready")
	}()
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func load(port string, conc int, secs float64, work string) {
	url := "http://127.0.0.1:" + port + "/?work=" + work
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	var mu sync.Mutex
	var lat []float64
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []float64
			for time.Now().Before(end) {
				t0 := time.Now()
				resp, err := client.Get(url)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mine = append(mine, time.Since(t0).Seconds())
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Float64s(lat)
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return lat[int(p*float64(len(lat)-1))]
	}
	out, _ := json.Marshal(map[string]float64{"requests": float64(len(lat)), "per_s": float64(len(lat)) / secs,
		"p50_s": q(0.5), "p99_s": q(0.99), "max_s": q(1)})
	fmt.Println(string(out))
}

func main() {
	if len(os.Args) >= 3 && os.Args[1] == "serve" {
		serve(os.Args[2])
		return
	}
	if len(os.Args) >= 5 && os.Args[1] == "load" {
		conc, _ := strconv.Atoi(os.Args[3])
		secs, _ := strconv.ParseFloat(os.Args[4], 64)
		work := "8"
		if len(os.Args) >= 6 {
			work = os.Args[5]
		}
		load(os.Args[2], conc, secs, work)
		return
	}
	fmt.Fprintln(os.Stderr, "usage: gohttp serve PORT | gohttp load PORT CONC SECS [WORK]")
	os.Exit(2)
}
