package metrics

import (
	"context"
	"fmt"
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

// dialFrom opens a TCP connection to addr from the loopback address src
// (any of 127.0.0.0/8), so that a test can be several clients.
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c within wait (a read
// returns EOF or a reset) rather than leaving it open.
func closedByServer(c net.Conn, wait time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// scrapeFrom is one GET /metrics on a new connection from src.
func scrapeFrom(src, url string) int {
	tr := &http.Transport{
		DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext,
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	return scrapeStatus(&http.Client{Transport: tr, Timeout: 5 * time.Second}, url)
}

// TestTCPHalfOpenConnsDoNotBlockScrapes is #41 item 6: MaxTCPConns
// connections that send nothing, from eight client addresses (the bound
// per address), used to make every later scrape fail until
// ReadHeaderTimeout closed them. Now a new connection closes the oldest one
// that is not in a scrape: 20 scrapes from another address all answer, the
// holder closed is the oldest, and a scrape in progress when the holders
// arrive is never the one closed.
func TestTCPHalfOpenConnsDoNotBlockScrapes(t *testing.T) {
	release := make(chan struct{})
	reg := Handler(prometheus.NewRegistry())
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("slow") != "" {
			<-release
		}
		reg.ServeHTTP(w, r)
	})
	addr := serveTCP(t, h)
	url := "http://" + addr + "/metrics"

	// A scrape in progress: its handler waits until every holder is in.
	slowDone := make(chan int, 1)
	go func() { slowDone <- scrapeFrom("127.0.0.20", url+"?slow=1") }()
	// Wait until the slow scrape's request is in its handler, so that it
	// is busy before the holders arrive (it then counts among the 64).
	time.Sleep(200 * time.Millisecond)

	var held []net.Conn
	for i := range MaxTCPConns {
		src := fmt.Sprintf("127.0.0.%d", 2+i/MaxTCPConnsPerAddr)
		held = append(held, dialFrom(t, src, addr))
	}
	close(release)
	if got := <-slowDone; got != http.StatusOK {
		t.Fatalf("the scrape in progress when the holders arrived: status %d, want 200", got)
	}
	ok := 0
	for range 20 {
		if scrapeFrom("127.0.0.30", url) == http.StatusOK {
			ok++
		}
	}
	if ok != 20 {
		t.Errorf("%d of 20 scrapes answered with %d connections holding without a request, want 20", ok, MaxTCPConns)
	}
	// The first scrape made room by closing the oldest holder (the slow
	// scrape's connection was busy, then closed by its client).
	if !closedByServer(held[0], 2*time.Second) {
		t.Error("the oldest holding connection is still open; the new connections should have closed it")
	}
	if closedByServer(held[len(held)-1], 200*time.Millisecond) {
		t.Error("the newest holding connection was closed; only the oldest should make room")
	}
}

// TestTCPConnsPerAddr: one client address holds at most MaxTCPConnsPerAddr
// connections; its next connection closes its own oldest, not another
// address's.
func TestTCPConnsPerAddr(t *testing.T) {
	addr := serveTCP(t, Handler(prometheus.NewRegistry()))
	other := dialFrom(t, "127.0.0.3", addr)
	var mine []net.Conn
	for range MaxTCPConnsPerAddr {
		mine = append(mine, dialFrom(t, "127.0.0.2", addr))
	}
	// Let the server accept them in order before the one over the bound.
	time.Sleep(200 * time.Millisecond)
	last := dialFrom(t, "127.0.0.2", addr)
	if !closedByServer(mine[0], 2*time.Second) {
		t.Errorf("connection %d of one address did not close that address's oldest", MaxTCPConnsPerAddr+1)
	}
	if closedByServer(other, 200*time.Millisecond) {
		t.Error("another address's connection was closed to make room for this address")
	}
	if closedByServer(last, 200*time.Millisecond) {
		t.Error("the new connection was closed instead of the oldest")
	}
	// A scrape from that address still answers.
	if got := scrapeFrom("127.0.0.2", "http://"+addr+"/metrics"); got != http.StatusOK {
		t.Errorf("scrape from an address at its bound: status %d, want 200", got)
	}
}
