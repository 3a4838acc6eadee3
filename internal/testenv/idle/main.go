// Command idle is the program of the tests' container images on real nodes: the pod sandbox's
// pause process and a workload's container. It waits for SIGTERM or SIGINT and exits 0. With
// -listen it also answers HTTP on that address with its pod's name (HOSTNAME), so a test can
// reach a pod through a Service; with -get it is that test's client instead: it fetches the URL
// until it answers 200 (up to a minute), prints the answer and exits 0, or exits 1.
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "", "answer HTTP on this address (e.g. :8080) with the pod's name")
	get := flag.String("get", "", "fetch this URL until it answers, print the answer, exit")
	flag.Parse()
	if *get != "" {
		os.Exit(fetch(*get))
	}
	if *listen != "" {
		host, _ := os.Hostname()
		go func() {
			err := http.ListenAndServe(*listen, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				fmt.Fprintln(w, host)
			}))
			fmt.Fprintln(os.Stderr, "idle:", err)
			os.Exit(1)
		}()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}

func fetch(url string) int {
	client := &http.Client{Timeout: 2 * time.Second}
	var last error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		resp, err := client.Get(url)
		if err != nil {
			last = err
			continue
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err == nil && resp.StatusCode == http.StatusOK {
			fmt.Printf("%s", body)
			return 0
		}
		last = fmt.Errorf("%s: %v", resp.Status, err)
	}
	fmt.Fprintln(os.Stderr, "idle: get", url+":", last)
	return 1
}
