// Package ratelog keeps a log readable when the same warning repeats: each call site may log a
// few lines at once and then one line per interval share (a token bucket); the next line it lets
// through says how many were held back in between. Metrics, not logs, count every occurrence.
package ratelog

import (
	"io"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// Defaults for Config.
const (
	// DefaultBurst is how many lines a site may log at once when Config.Burst is zero.
	DefaultBurst = 5
	// DefaultInterval is how long a site takes to earn back a full burst when
	// Config.Interval is zero: with the default burst, one line every 12 s in a flood.
	DefaultInterval = time.Minute
	// MaxSites bounds the records a Limiter keeps: the sites beyond the first MaxSites-1 share
	// the last one.
	MaxSites = 256
)

// SuppressedField is the log field that says how many lines of the same site were held back
// since the last one logged.
const SuppressedField = "suppressed"

// overflowSite is the shared record of the sites beyond MaxSites.
const overflowSite = "\x00overflow"

// Config configures a Limiter. The zero value gives the defaults.
type Config struct {
	// Burst is how many lines a site may log at once; zero means DefaultBurst, negative is
	// taken as zero.
	Burst int
	// Interval is how long a site takes to earn back Burst lines; zero (or negative) means
	// DefaultInterval.
	Interval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Limiter decides, per call site, which lines are logged. Its zero value is ready to use with
// the defaults; it is safe for concurrent use and must not be copied after first use.
type Limiter struct {
	cfg   Config
	mu    sync.Mutex
	sites map[string]*site
}

// site is one call site's token bucket.
type site struct {
	tokens     float64
	last       time.Time
	suppressed uint64
}

// New returns a Limiter with cfg.
func New(cfg Config) *Limiter { return &Limiter{cfg: cfg} }

// Allow takes a line's share for site (a constant naming the call site, never a value from a
// payload). It reports whether the line may be logged now and, if so, how many lines of the site
// were held back since the last one let through.
func (l *Limiter) Allow(name string) (ok bool, suppressed uint64) {
	burst, interval, now := l.settings()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.site(name, burst, now)
	if elapsed := now.Sub(s.last); elapsed > 0 {
		s.tokens = min(float64(burst), s.tokens+float64(burst)*elapsed.Seconds()/interval.Seconds())
		s.last = now
	}
	if s.tokens < 1 {
		s.suppressed++
		return false, 0
	}
	s.tokens--
	suppressed, s.suppressed = s.suppressed, 0
	return true, suppressed
}

// Logger returns the logger for one line at site: log itself (with SuppressedField when lines
// were held back) if the line may be logged, else a logger that discards everything.
func (l *Limiter) Logger(name string, log logrus.FieldLogger) logrus.FieldLogger {
	ok, suppressed := l.Allow(name)
	switch {
	case !ok:
		return discard
	case suppressed > 0:
		return log.WithField(SuppressedField, suppressed)
	}
	return log
}

func (l *Limiter) settings() (burst int, interval time.Duration, now time.Time) {
	burst, interval = l.cfg.Burst, l.cfg.Interval
	if burst == 0 {
		burst = DefaultBurst
	}
	burst = max(burst, 0)
	if interval <= 0 {
		interval = DefaultInterval
	}
	if l.cfg.Now != nil {
		return burst, interval, l.cfg.Now()
	}
	return burst, interval, time.Now()
}

// site returns name's record, making one with a full burst; l.mu is held.
func (l *Limiter) site(name string, burst int, now time.Time) *site {
	if s, ok := l.sites[name]; ok {
		return s
	}
	if l.sites == nil {
		l.sites = map[string]*site{}
	}
	if len(l.sites) >= MaxSites-1 {
		if s, ok := l.sites[overflowSite]; ok {
			return s
		}
		name = overflowSite
	}
	s := &site{tokens: float64(burst), last: now}
	l.sites[name] = s
	return s
}

// discard is the logger of lines held back.
var discard logrus.FieldLogger = func() *logrus.Logger {
	l := logrus.New()
	l.Out = io.Discard
	l.Level = logrus.PanicLevel
	return l
}()
