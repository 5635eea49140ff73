package metrics

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rdmad/rdmad/client/apitype"
	"github.com/rdmad/rdmad/test/bench/peersnap"
)

// scrapeWith GETs /metrics of h with the Accept and Accept-Encoding
// headers given and returns the body as sent and its Content-Encoding.
func scrapeWith(t *testing.T, h http.Handler, accept, encoding string) ([]byte, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if encoding != "" {
		req.Header.Set("Accept-Encoding", encoding)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes(), rec.Header().Get("Content-Encoding")
}

// gunzipOne decompresses body, which must be one gzip member.
func gunzipOne(t *testing.T, body []byte) []byte {
	t.Helper()
	br := bytes.NewReader(body) // a ByteReader: gzip reads no further than its member
	zr, err := gzip.NewReader(br)
	if err != nil {
		t.Fatalf("gzip header: %v", err)
	}
	zr.Multistream(false)
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	if br.Len() != 0 {
		t.Errorf("%d bytes after the first gzip member", br.Len())
	}
	return out
}

func sortedLines(b []byte) []string {
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	slices.Sort(lines)
	return lines
}

// TestCachedScrapeIsPromhttps: the cached handler answers what promhttp
// answers for one registry of the whole collector, line for line, in the
// text format and OpenMetrics, plain and gzip-compressed (one gzip member,
// which every decompressor reads), each family's lines together (the text
// parser refuses a family that comes twice).
func TestCachedScrapeIsPromhttps(t *testing.T) {
	c := fixtureCollector(t)
	whole := prometheus.NewRegistry()
	whole.MustRegister(c)
	want := Handler(whole) // promhttp's
	got := Handler(NewRegistry(c, false))
	for _, accept := range []string{"", "application/openmetrics-text; version=1.0.0"} {
		w, _ := scrapeWith(t, want, accept, "")
		plain, enc := scrapeWith(t, got, accept, "")
		if enc != "" {
			t.Errorf("Accept-Encoding none: Content-Encoding %q", enc)
		}
		zipped, enc := scrapeWith(t, got, accept, "gzip, deflate")
		if enc != "gzip" {
			t.Fatalf("Accept-Encoding gzip: Content-Encoding %q", enc)
		}
		if unzipped := gunzipOne(t, zipped); !bytes.Equal(unzipped, plain) {
			t.Errorf("Accept %q: the gzip answer is not the plain one:\n%s\n---\n%s", accept, unzipped, plain)
		}
		if !slices.Equal(sortedLines(plain), sortedLines(w)) {
			t.Errorf("Accept %q: cached scrape differs from promhttp's:\n%s\n--- promhttp:\n%s", accept, plain, w)
		}
		if accept == "" {
			p := expfmt.NewTextParser(model.LegacyValidation)
			if _, err := p.TextToMetricFamilies(bytes.NewReader(plain)); err != nil {
				t.Errorf("the text format does not parse: %v", err)
			}
		} else if !bytes.HasSuffix(plain, []byte("\n# EOF\n")) || bytes.Count(plain, []byte("# EOF")) != 1 {
			t.Errorf("OpenMetrics does not end in one # EOF:\n%s", plain)
		}
		if !bytes.Contains(plain, []byte(`rdmad_peer_up{`)) {
			t.Errorf("no peer series in\n%s", plain)
		}
	}
}

// TestCachedScrapeFollowsSnapshot: the peers' series are encoded once per
// snapshot, and a new snapshot is encoded anew; what is read at scrape
// time (the ethtool counters, the collectors' success) is read at every
// scrape, the snapshot unchanged.
func TestCachedScrapeFollowsSnapshot(t *testing.T) {
	var cur atomic.Pointer[apitype.Snapshot]
	cur.Store(peersnap.Snapshot(3, 1))
	snap := cur.Load()
	var refused atomic.Uint64
	var reads atomic.Int64
	c := NewCollector(Options{Snapshot: cur.Load, SysfsRoot: t.TempDir(),
		DBusRefused: func() map[string]uint64 { return map[string]uint64{"denied": refused.Add(1)} },
		Resources: func() apitype.Resources {
			if reads.Add(1) > 1 {
				return apitype.Resources{Error: "rdmares: dump: timed out"}
			}
			return apitype.Resources{}
		}})
	reg := NewRegistry(c, false)
	h := Handler(reg)
	first, _ := scrapeWith(t, h, "", "")
	second, _ := scrapeWith(t, h, "", "")
	blk := reg.cur.Load()
	if blk == nil || blk.snap != snap {
		t.Fatalf("the scrapes cached no block of the snapshot")
	}
	for _, b := range [][]byte{first, second} {
		if !bytes.Contains(b, []byte(`rdmad_peer_up{group="tor-000",peer="`+peersnap.Addr(0).String()+`"} 1`)) {
			t.Errorf("peer 0 is not up in\n%s", b)
		}
	}
	if bytes.Equal(first, second) {
		t.Errorf("two scrapes of one snapshot are the same: the scrape-time reads were cached")
	}
	for _, line := range []string{`rdmad_dbus_calls_refused_total{reason="denied"} 2`, `rdmad_scrape_collector_success{collector="rdma_netlink"} 0`} {
		if !bytes.Contains(second, []byte(line+"\n")) {
			t.Errorf("the second scrape lacks %s (read at scrape time):\n%s", line, second)
		}
	}
	if !bytes.Contains(first, []byte(`rdmad_scrape_collector_success{collector="rdma_netlink"} 1`+"\n")) {
		t.Errorf("the first scrape lacks the successful read:\n%s", first)
	}

	next := *snap
	next.Peers.Peers = slices.Clone(snap.Peers.Peers)
	next.Peers.Peers[0].State = apitype.PeerDown
	cur.Store(&next)
	third, _ := scrapeWith(t, h, "", "gzip")
	third = gunzipOne(t, third)
	if !bytes.Contains(third, []byte(`rdmad_peer_up{group="tor-000",peer="`+peersnap.Addr(0).String()+`"} 0`)) {
		t.Errorf("the scrape after a new snapshot still has the old one's peers:\n%s", third)
	}
}

func TestAcceptsGzip(t *testing.T) {
	for h, want := range map[string]bool{
		"": false, "gzip": true, "GZIP": true, "deflate, gzip;q=1.0, *;q=0.5": true, "gzip;q=0": false,
		"identity": false, "*": true, "br, gzip ; q=0.5": true, "x-gzip": true, "gzipx": false,
	} {
		if got := acceptsGzip(h); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", h, got, want)
		}
	}
}

// TestCachedScrapeSamePeers: a publish of something else than the peers
// (an inventory read) keeps the peers' encoding, one of the peers encodes
// them anew.
func TestCachedScrapeSamePeers(t *testing.T) {
	var cur atomic.Pointer[apitype.Snapshot]
	cur.Store(peersnap.Snapshot(3, 1))
	reg := NewRegistry(NewCollector(Options{Snapshot: cur.Load, SysfsRoot: t.TempDir()}), false)
	h := Handler(reg)
	scrapeWith(t, h, "", "")
	first := reg.cur.Load()

	other := *cur.Load()
	other.Seq++
	other.Devices = []apitype.Device{{Name: "rxe0"}}
	cur.Store(&other)
	out, _ := scrapeWith(t, h, "", "")
	if reg.cur.Load() != first {
		t.Errorf("a publish that kept the peers encoded them again")
	}
	if !bytes.Contains(out, []byte(`rdmad_infiniband_info{board_id="",device="rxe0"`)) {
		t.Errorf("the scrape lacks the new device:\n%s", out)
	}

	peers := other
	peers.Peers.Counters.ProbesNotSent = 7
	cur.Store(&peers)
	out, _ = scrapeWith(t, h, "", "")
	if reg.cur.Load() == first || !bytes.Contains(out, []byte("rdmad_peer_probes_not_sent_total 7\n")) {
		t.Errorf("a publish of the peers kept their old encoding:\n%s", out)
	}
}

func TestSamePeers(t *testing.T) {
	a := peersnap.Snapshot(2, 1).Peers
	b := a
	if !samePeers(&a, &b) {
		t.Errorf("a copy is not the same peers")
	}
	b.Peers = slices.Clone(a.Peers)
	if samePeers(&a, &b) {
		t.Errorf("a new peer list is the same peers")
	}
	b = a
	b.ControlError = "x"
	if samePeers(&a, &b) {
		t.Errorf("another control error is the same peers")
	}
	b = a
	b.Ports, a.Ports = []apitype.PeerPort{}, nil
	if !samePeers(&a, &b) {
		t.Errorf("no ports and an empty list of them differ")
	}
}

// TestCachedScrapeNameFilter: a scrape with name[] parameters gets only
// the families it names, as promhttp's filter gives them, peers' families
// (the cached block) and live ones alike.
func TestCachedScrapeNameFilter(t *testing.T) {
	c := fixtureCollector(t)
	whole := prometheus.NewRegistry()
	whole.MustRegister(c)
	want := Handler(whole) // promhttp's
	got := Handler(NewRegistry(c, false))
	get := func(h http.Handler, query string) []byte {
		req := httptest.NewRequest(http.MethodGet, "/metrics?"+query, nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET /metrics?%s: %d %s", query, rec.Code, rec.Body)
		}
		return rec.Body.Bytes()
	}
	for _, q := range []string{"name[]=rdmad_peer_up", "name[]=rdmad_peer_up&name[]=rdmad_build_info", "name[]=rdmad_no_such_metric"} {
		w, g := get(want, q), get(got, q)
		if !slices.Equal(sortedLines(g), sortedLines(w)) {
			t.Errorf("?%s: cached handler differs from promhttp's:\n%s\n--- promhttp:\n%s", q, g, w)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(g)), "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name, _, _ := strings.Cut(line, "{")
			name, _, _ = strings.Cut(name, " ")
			if !strings.Contains(q, "name[]="+name) {
				t.Errorf("?%s: series of %s in the answer: %s", q, name, line)
			}
		}
	}
	if g := get(got, "name[]=rdmad_peer_up"); !bytes.Contains(g, []byte("rdmad_peer_up{")) {
		t.Errorf("?name[]=rdmad_peer_up: no rdmad_peer_up series:\n%s", g)
	}
}

// TestScrapeAsksFresh: a scrape calls Options.Fresh with its request's
// context before it loads the snapshot, so that the peer figures the
// daemon's manager builds on request are the ones exported.
func TestScrapeAsksFresh(t *testing.T) {
	var cur atomic.Pointer[apitype.Snapshot]
	cur.Store(peersnap.Snapshot(3, 1))
	var asked atomic.Int64
	c := NewCollector(Options{Snapshot: cur.Load, SysfsRoot: "testdata/netroot", GoVersion: "go1.x",
		Fresh: func(ctx context.Context) {
			n := asked.Add(1)
			next := *cur.Load()
			next.Seq += 1
			next.Peers.Peers = slices.Clone(next.Peers.Peers)
			p := &next.Peers.Peers[0]
			p.Paths = slices.Clone(p.Paths)
			p.Paths[0].Sent = uint64(5000 + n)
			cur.Store(&next)
		}})
	h := Handler(NewRegistry(c, true))
	for i := int64(1); i <= 2; i++ {
		body, _ := scrapeWith(t, h, "", "")
		const want = "rdmad_peer_probes_sent_total{"
		found := false
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, want) && strings.HasSuffix(line, fmt.Sprintf(" %d", 5000+i)) {
				found = true
			}
		}
		if asked.Load() != i || !found {
			t.Errorf("scrape %d: Fresh asked %d times; want %d, and the sent count it made (%d) exported", i, asked.Load(), i, 5000+i)
		}
	}
}
