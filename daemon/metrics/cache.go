package metrics

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/rdmad/rdmad/client/apitype"
)

// A scrape is mostly the peers: at 10,000 peers some 130,000 series,
// 10 MB of text, which took 285 ms and 61 MB to gather, encode and
// compress on every scrape. They are a function of the snapshot alone,
// and a published snapshot never changes, so a Registry encodes the
// collector's cached sections (the peers) once per snapshot and format, and
// compresses them once when a scraper asks for gzip; each scrape then
// gathers and encodes only the rest (the device, daemon and policy series,
// the scrape-time reads of ethtool and RDMA netlink with their own
// success and duration series, the Go runtime's) and splices the cached
// bytes in. A scrape's answer is what promhttp would send for the whole
// registry, but for the order of the families: the cached block stands
// where the first of its families sorts, and a live family whose name
// sorts inside it follows it (the formats only ask that a family's lines
// be together).

// A Registry is what the metrics handlers serve: the collector's sections
// read at scrape time (and the Go runtime collectors) in a
// prometheus.Registry, and its cached sections encoded once per snapshot.
type Registry struct {
	c      *Collector
	live   *prometheus.Registry
	cached *prometheus.Registry
	// building is the snapshot the cached registry's collector reads,
	// set under mu while an encoding is made (Gather takes mu too).
	building *apitype.Snapshot
	mu       sync.Mutex // one encoding of the cached sections at a time
	cur      atomic.Pointer[cachedScrape]
}

var _ prometheus.Gatherer = (*Registry)(nil)

// NewRegistry returns a registry with c and, when runtime is true, the Go
// runtime and process collectors (go_*, process_*).
func NewRegistry(c *Collector, runtime bool) *Registry {
	r := &Registry{c: c, live: prometheus.NewRegistry(), cached: prometheus.NewRegistry()}
	r.live.MustRegister(sectionCollector{c: c, cached: false, snap: c.opts.Snapshot})
	r.cached.MustRegister(sectionCollector{c: c, cached: true, snap: func() *apitype.Snapshot { return r.building }})
	if runtime {
		r.live.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return r
}

// Gather gathers everything, as one prometheus.Registry of all the
// collectors would (tests and promlint read it). It encodes nothing and
// caches nothing.
func (r *Registry) Gather() ([]*dto.MetricFamily, error) {
	r.mu.Lock()
	r.building = r.c.opts.Snapshot()
	cached, cerr := r.cached.Gather()
	r.building = nil
	r.mu.Unlock()
	live, lerr := r.live.Gather()
	mfs := append(live, cached...)
	sortFamilies(mfs)
	if lerr != nil {
		return mfs, lerr
	}
	return mfs, cerr
}

// A sectionCollector collects the sections of c that are cached, or
// those that are not, from the snapshot snap returns.
type sectionCollector struct {
	c      *Collector
	cached bool
	snap   func() *apitype.Snapshot
}

func (sc sectionCollector) Describe(ch chan<- *prometheus.Desc) {
	if sc.cached {
		describeSections(sc.c.cached, ch)
	} else {
		sc.c.describeLive(ch)
	}
}

func (sc sectionCollector) Collect(ch chan<- prometheus.Metric) {
	s := sc.snap()
	if s == nil {
		return
	}
	if sc.cached {
		sc.c.collectSections(sc.c.cached, s, ch)
	} else {
		sc.c.collectLive(s, ch)
	}
}

// A cachedScrape is the cached sections of one snapshot, encoded: of
// every snapshot with the same peers (samePeers).
type cachedScrape struct {
	snap *apitype.Snapshot
	// first is the name of the first family, where the block goes.
	first string
	mu    sync.Mutex // guards formats
	// formats holds the encodings made so far, by format (a snapshot
	// usually sees one scraper's format, text or OpenMetrics).
	formats map[expfmt.Format]*encodedBlock
}

// An encodedBlock is the cached families in one format: their text, and
// that text compressed as a run of deflate blocks that a gzip stream can
// hold in its middle (made when a scraper first asks for gzip).
type encodedBlock struct {
	text     []byte
	deflated []byte
	once     sync.Once
}

// block returns the cached sections of snap encoded in format.
func (r *Registry) block(snap *apitype.Snapshot, format expfmt.Format) (*cachedScrape, *encodedBlock) {
	cs := r.cur.Load()
	if cs == nil || !samePeers(&cs.snap.Peers, &snap.Peers) {
		r.mu.Lock()
		if cs = r.cur.Load(); cs == nil || !samePeers(&cs.snap.Peers, &snap.Peers) {
			cs = &cachedScrape{snap: snap, formats: map[expfmt.Format]*encodedBlock{}}
			r.cur.Store(cs)
		}
		r.mu.Unlock()
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if b := cs.formats[format]; b != nil {
		return cs, b
	}
	r.mu.Lock()
	r.building = snap
	// A metric that fails (a duplicate label set from a broken
	// snapshot) must not hide the others: what was gathered is kept, as
	// promhttp.ContinueOnError does.
	mfs, _ := r.cached.Gather()
	r.building = nil
	r.mu.Unlock()
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, format)
	for _, mf := range mfs {
		enc.Encode(mf)
	}
	if len(mfs) > 0 {
		cs.first = mfs[0].GetName()
	}
	b := &encodedBlock{text: buf.Bytes()}
	cs.formats[format] = b
	return cs, b
}

// samePeers reports whether a and b are one state of the peer manager:
// every slice, map and pointer the same one (a published state is never
// changed, and the manager makes a new one for each publish), every other
// field equal. A publish of anything else (an inventory read, a loopback
// round) copies the snapshot with its peers as they were, and the cached
// sections, which read only the peers, stay as they were encoded. Fields
// are walked by reflection so that one added to apitype.Peers is compared
// too; one that cannot be compared counts as changed.
func samePeers(a, b *apitype.Peers) bool {
	if a == b {
		return true
	}
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	for i := range va.NumField() {
		fa, fb := va.Field(i), vb.Field(i)
		switch fa.Kind() {
		case reflect.Slice:
			if fa.Len() != fb.Len() || fa.Len() > 0 && fa.UnsafePointer() != fb.UnsafePointer() {
				return false
			}
		case reflect.Map, reflect.Pointer:
			if fa.UnsafePointer() != fb.UnsafePointer() {
				return false
			}
		default:
			if !fa.Comparable() || !fa.Equal(fb) {
				return false
			}
		}
	}
	return true
}

// deflate returns b's text as deflate blocks that end on a byte boundary
// and are not the last of their stream.
func (b *encodedBlock) deflate() []byte {
	b.once.Do(func() { b.deflated = deflateRun(b.text, false) })
	return b.deflated
}

// deflateRun compresses p as deflate blocks: the final ones of a stream
// when final, else ones that end on a byte boundary (a sync flush) and
// that more blocks may follow. A run refers to no byte before its own, so
// runs compressed apart can follow one another in one stream. BestSpeed:
// a snapshot's peers are compressed once for every scrape of it, while
// the scraper waits.
func deflateRun(p []byte, final bool) []byte {
	var buf bytes.Buffer
	fw := flatePool.Get().(*flate.Writer)
	defer flatePool.Put(fw)
	fw.Reset(&buf)
	fw.Write(p)
	if final {
		fw.Close()
	} else {
		fw.Flush()
	}
	return buf.Bytes()
}

// flatePool keeps deflate writers, which are some 600 KB each, from one
// scrape to the next.
var flatePool = sync.Pool{New: func() any {
	fw, _ := flate.NewWriter(nil, flate.BestSpeed) // the level is valid
	return fw
}}

// gzipHeader is a gzip member's header: deflate, no name, no time, an
// unknown OS, as compress/gzip writes it.
var gzipHeader = []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}

// scrapeTimeout bounds a scrape, as promhttp's HandlerOpts.Timeout did:
// a scrape-time read that hangs gets the scraper a 503, not a wait.
const scrapeTimeout = 10 * time.Second

// A scrapeHandler serves a Registry.
type scrapeHandler struct {
	reg   *Registry
	slots chan struct{}
	// filtered serves a scrape that names its families (name[]=...,
	// promhttp's filter): the cached block holds every peers family at
	// once, so such a scrape is gathered and encoded whole, under the same
	// bound as the others.
	filtered http.Handler
}

// newScrapeHandler returns reg's GET /metrics handler, bounded as Handler
// says.
func newScrapeHandler(reg *Registry) http.Handler {
	h := &scrapeHandler{reg: reg, slots: make(chan struct{}, MaxScrapes), filtered: promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})}
	return http.TimeoutHandler(h, scrapeTimeout, fmt.Sprintf("Exceeded configured timeout of %v.\n", scrapeTimeout))
}

func (h *scrapeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		http.Error(w, fmt.Sprintf("Limit of concurrent requests reached (%d), try again later.", MaxScrapes), http.StatusServiceUnavailable)
		return
	}
	// The peers' figures are built when a reader asks (probe's Fresh):
	// a filtered scrape asks too.
	if f := h.reg.c.opts.Fresh; f != nil {
		f(r.Context())
	}
	if r.URL.Query().Has("name[]") {
		h.filtered.ServeHTTP(w, r)
		return
	}
	format := expfmt.NegotiateAccept(r.Header, expfmt.DefaultOpenMetricsAcceptedFormats()...)
	var cs *cachedScrape
	var blk *encodedBlock
	// The cached block is of the snapshot current now; the live sections
	// load the snapshot again (in Gather), which a publish in between can
	// make the next one: the two parts are then of two states published
	// one after the other, never of a state that was not.
	if snap := h.reg.c.opts.Snapshot(); snap != nil {
		cs, blk = h.reg.block(snap, format)
	}
	mfs, err := h.reg.live.Gather()
	if err != nil && len(mfs) == 0 && (blk == nil || len(blk.text) == 0) {
		http.Error(w, "An error has occurred while serving metrics:\n\n"+err.Error(), http.StatusInternalServerError)
		return
	}
	// The families that sort before the cached block, and the others.
	var before, after bytes.Buffer
	encBefore := expfmt.NewEncoder(&before, format)
	encAfter := expfmt.NewEncoder(&after, format)
	for _, mf := range mfs {
		if cs != nil && cs.first != "" && mf.GetName() < cs.first {
			encBefore.Encode(mf)
		} else {
			encAfter.Encode(mf)
		}
	}
	if c, ok := encAfter.(expfmt.Closer); ok {
		c.Close() // OpenMetrics' "# EOF"
	}
	hdr := w.Header()
	hdr.Add("Vary", "Accept")
	hdr.Add("Vary", "Accept-Encoding")
	hdr.Set("Content-Type", string(format))
	var text []byte
	if blk != nil {
		text = blk.text
	}
	if !acceptsGzip(r.Header.Get("Accept-Encoding")) {
		hdr.Set("Content-Length", strconv.Itoa(before.Len()+len(text)+after.Len()))
		w.Write(before.Bytes())
		w.Write(text)
		w.Write(after.Bytes())
		return
	}
	// One gzip member: the live families before the block and the
	// cached block are deflate runs that more blocks follow, the live
	// families after it the final run; the trailer has the CRC of the
	// whole text.
	crc := crc32.ChecksumIEEE(before.Bytes())
	var mid []byte
	if len(text) > 0 {
		mid = blk.deflate()
	}
	crc = crc32.Update(crc, crc32.IEEETable, text) // some GB/s: no need to cache it
	crc = crc32.Update(crc, crc32.IEEETable, after.Bytes())
	var trailer [8]byte
	binary.LittleEndian.PutUint32(trailer[0:], crc)
	binary.LittleEndian.PutUint32(trailer[4:], uint32(before.Len()+len(text)+after.Len()))
	head := deflateRun(before.Bytes(), false)
	tail := deflateRun(after.Bytes(), true)
	hdr.Set("Content-Encoding", "gzip")
	hdr.Set("Content-Length", strconv.Itoa(len(gzipHeader)+len(head)+len(mid)+len(tail)+len(trailer)))
	w.Write(gzipHeader)
	w.Write(head)
	w.Write(mid)
	w.Write(tail)
	w.Write(trailer[:])
}

// acceptsGzip reports whether an Accept-Encoding header accepts gzip
// (or *) with a quality above 0.
func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		coding, params, _ := strings.Cut(part, ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		if coding != "gzip" && coding != "x-gzip" && coding != "*" {
			continue
		}
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					q = f
				}
			}
		}
		if q > 0 {
			return true
		}
	}
	return false
}

// sortFamilies sorts families by name, as a prometheus.Registry gathers
// them.
func sortFamilies(mfs []*dto.MetricFamily) {
	slices.SortFunc(mfs, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
}
