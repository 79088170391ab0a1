// agemetrics serves age metrics with known values through the real Go client
// (github.com/prometheus/client_golang), for tests/test_age.py:
//
//	app_lag_seconds{session="a"} 2.5, {session="b"} 7   gauge
//	app.lag.seconds 4.25                                gauge with a UTF-8 name
//	app_age_seconds                                     histogram: 0.75 every 20 ms, each with an exemplar
//	app_messages_total 42                               counter whose last exemplar is 2
//
// plus the Go and process collectors. /metrics negotiates OpenMetrics (the
// only format with exemplars) with _created samples; /metrics-text never does.
// Prints "ready" once it listens.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: agemetrics PORT")
		os.Exit(2)
	}
	port, err := strconv.Atoi(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	lag := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "app_lag_seconds", Help: "Age of the last message, by session."}, []string{"session"})
	lag.WithLabelValues("a").Set(2.5)
	lag.WithLabelValues("b").Set(7)
	utf8 := prometheus.NewGauge(prometheus.GaugeOpts{Name: "app.lag.seconds", Help: "The same with a UTF-8 name."})
	utf8.Set(4.25)
	age := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "app_age_seconds", Help: "Age of each message.", Buckets: prometheus.DefBuckets})
	msgs := prometheus.NewCounter(prometheus.CounterOpts{Name: "app_messages_total", Help: "Messages handled."})
	msgs.(prometheus.ExemplarAdder).AddWithExemplar(40, prometheus.Labels{"trace_id": "first"})
	msgs.(prometheus.ExemplarAdder).AddWithExemplar(2, prometheus.Labels{"trace_id": "second"})
	reg.MustRegister(lag, utf8, age, msgs)

	go func() {
		for i := 0; ; i++ {
			age.(prometheus.ExemplarObserver).ObserveWithExemplar(0.75, prometheus.Labels{"trace_id": fmt.Sprintf("t%d", i)})
			time.Sleep(20 * time.Millisecond)
		}
	}()

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true, EnableOpenMetricsTextCreatedSamples: true}))
	mux.Handle("/metrics-text", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("ready")
	if err := http.Serve(ln, mux); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
