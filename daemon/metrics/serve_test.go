package metrics

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// slowCollector takes a while per scrape, like a node with many peers.
type slowCollector struct{ d time.Duration }

var slowDesc = prometheus.NewDesc("rdmad_test_slow", "A metric that takes a while.", nil, nil)

func (s slowCollector) Describe(ch chan<- *prometheus.Desc) { ch <- slowDesc }
func (s slowCollector) Collect(ch chan<- prometheus.Metric) {
	time.Sleep(s.d)
	ch <- prometheus.MustNewConstMetric(slowDesc, prometheus.GaugeValue, 1)
}

// serveTCP serves h with Serve on a loopback port until the test ends.
func serveTCP(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func scrapeStatus(c *http.Client, url string) int {
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestTCPScrapersDoNotStarveSocket is issue #24's shared scrape bound:
// four scrapers looping over TCP made 17 of 40 socket scrapes fail with
// 503. With a bound each, eight TCP loop-scrapers (twice the bound, so they
// do get 503s) leave every one of 40 socket scrapes answered.
func TestTCPScrapersDoNotStarveSocket(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(slowCollector{20 * time.Millisecond})
	socket, tcp := Handlers(reg)
	addr := serveTCP(t, tcp)
	sock := httptest.NewServer(socket) // the bound is the handler's, whatever serves it
	defer sock.Close()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var tcpOK, tcpBusy atomic.Int64
	for range 2 * MaxScrapes {
		wg.Go(func() {
			c := &http.Client{Timeout: 5 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				switch scrapeStatus(c, "http://"+addr+"/metrics") {
				case http.StatusOK:
					tcpOK.Add(1)
				case http.StatusServiceUnavailable:
					tcpBusy.Add(1)
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond) // the TCP scrapers are at it
	failed := 0
	for range 40 {
		if code := scrapeStatus(sock.Client(), sock.URL+"/metrics"); code != http.StatusOK {
			failed++
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("TCP: %d answered, %d refused (503)", tcpOK.Load(), tcpBusy.Load())
	if failed != 0 {
		t.Errorf("%d of 40 socket scrapes failed while TCP scrapers looped; want none", failed)
	}
	if tcpBusy.Load() == 0 {
		t.Errorf("no TCP scrape got 503: the test did not load the TCP bound")
	}
}

// TestTCPConnLimit: past MaxTCPConns open connections, a new one is closed
// at once (it cannot hold a descriptor), and scrapes work again once the
// holders leave.
func TestTCPConnLimit(t *testing.T) {
	addr := serveTCP(t, Handler(prometheus.NewRegistry()))
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range MaxTCPConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// The server accepts asynchronously: the next connection is the one
	// over the bound once all the others hold a slot.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
		if err == io.EOF {
			break // closed by the server at once
		}
		if time.Now().After(deadline) {
			t.Fatalf("connection %d was not closed by the server: %v", MaxTCPConns+1, err)
		}
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	c := &http.Client{Timeout: 5 * time.Second}
	for time.Now().Before(deadline) {
		if scrapeStatus(c, "http://"+addr+"/metrics") == http.StatusOK {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Error("no scrape answered after the holders closed their connections")
}
