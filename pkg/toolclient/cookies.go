package toolclient

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// cookieTransport is a session's transport: it sends the session's cookies on every request as
// one Cookie header and records the Set-Cookie lines of every answer, as an http.Client with a
// net/http/cookiejar.Jar does for the one host a session talks to, without the client parsing
// every Set-Cookie line into an http.Cookie or the jar matching domains and paths through its
// maps. It sets the Cookie header on the request it is given: every request through it is one
// the session made for itself.
type cookieTransport struct {
	next    http.RoundTripper
	cookies cookieStore
}

func (t *cookieTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if h := t.cookies.header(req.URL.Scheme == "https", req.URL.Path, time.Now); h != nil {
		req.Header["Cookie"] = h
	} else if req.Header != nil {
		delete(req.Header, "Cookie")
	}
	next := t.next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(req)
	if err == nil {
		if lines := resp.Header["Set-Cookie"]; len(lines) > 0 {
			t.cookies.set(req.URL.Path, lines, time.Now())
		}
	}
	return resp, err
}

// cookieStore is the cookies of one session with one host, kept as net/http/cookiejar keeps
// them (without a public suffix list): one cookie per domain, path and name, replaced when set
// again (keeping its place), removed by a Max-Age <= 0 or an Expires in the past, dropped when
// expired, sent to the paths its Path matches, the longest first, then in the order set.
type cookieStore struct {
	mu      sync.Mutex
	host    string // the canonical host: lower case, without port or trailing dot
	ip      bool   // host is an IP address
	entries []cookieEntry
	// sent is the header of the last request that carried every cookie (nil: build it again).
	sent []string
}

type cookieEntry struct {
	name, domain, path string
	pair               string // "name=value" as a Cookie header carries it
	expires            time.Time
	persistent         bool // expires is set (a Max-Age or an Expires): dropped once past it
	secure             bool // sent over https only (or to localhost)
	// raw is the Set-Cookie line the entry was set by, maxAge its Max-Age and ownPath whether it
	// has a Path: the same line again (for the same path) only moves the expiry.
	raw     string
	maxAge  int
	ownPath bool
}

// newCookieStore is an empty store for the host of a URL ("host:port", "[::1]:80", ...).
func newCookieStore(hostport string) cookieStore {
	host := hostport
	if hasPort(host) {
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	return cookieStore{host: host, ip: strings.ContainsAny(host, ":%") || net.ParseIP(host) != nil}
}

// hasPort reports whether host has a port, as net/http/cookiejar decides it.
func hasPort(host string) bool {
	colons := strings.Count(host, ":")
	if colons == 0 {
		return false
	}
	if colons == 1 {
		return true
	}
	return host[0] == '[' && strings.Contains(host, "]:")
}

// header is the Cookie header of a request to path (nil: none); now is called only when a cookie
// has an expiry.
func (s *cookieStore) header(https bool, path string, now func() time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.entries) == 0 {
		return nil
	}
	if path == "" {
		path = "/"
	}
	var t time.Time
	all := true
	for i := 0; i < len(s.entries); i++ {
		e := &s.entries[i]
		if e.persistent {
			if t.IsZero() {
				t = now()
			}
			if !e.expires.After(t) {
				s.entries = append(s.entries[:i], s.entries[i+1:]...)
				s.sent = nil
				i--
				continue
			}
		}
		if !pathMatch(e.path, path) || (e.secure && !https) {
			all = false
		}
	}
	if all && s.sent != nil {
		return s.sent
	}
	var sel []*cookieEntry
	for i := range s.entries {
		e := &s.entries[i]
		if pathMatch(e.path, path) && (!e.secure || https) {
			sel = append(sel, e)
		}
	}
	if len(sel) == 0 {
		return nil
	}
	var h string
	if len(sel) == 1 {
		h = sel[0].pair
	} else {
		// By path, the greater first (as the jar sorts), then in the order set: a stable sort.
		for i := 1; i < len(sel); i++ {
			for j := i; j > 0 && sel[j].path > sel[j-1].path; j-- {
				sel[j], sel[j-1] = sel[j-1], sel[j]
			}
		}
		var b strings.Builder
		for i, e := range sel {
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString(e.pair)
		}
		h = b.String()
	}
	v := []string{h}
	if all {
		s.sent = v
	}
	return v
}

// pathMatch is RFC 6265's path-match of a request path against a cookie's path.
func pathMatch(cookiePath, path string) bool {
	if path == cookiePath {
		return true
	}
	if strings.HasPrefix(path, cookiePath) {
		return cookiePath[len(cookiePath)-1] == '/' || path[len(cookiePath)] == '/'
	}
	return false
}

// maxSetCookies is net/http's limit on the Set-Cookie lines of one answer: past it, the answer's
// cookies are all ignored.
const maxSetCookies = 3000

// set records the Set-Cookie lines of an answer to a request to path.
func (s *cookieStore) set(path string, lines []string, now time.Time) {
	if len(lines) > maxSetCookies {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, line := range lines {
		if i := s.sameLine(line, path); i >= 0 {
			// Set again as it was: only a Max-Age moves the expiry; an Expires may have passed.
			e := &s.entries[i]
			switch {
			case e.maxAge > 0:
				e.expires = now.Add(time.Duration(e.maxAge) * time.Second)
			case e.persistent && !e.expires.After(now):
				s.remove(i)
			}
			continue
		}
		c, err := http.ParseSetCookie(line) // as net/http's client reads Set-Cookie for its jar
		if err != nil {
			continue
		}
		s.setOne(path, line, c, now)
	}
}

// sameLine is the entry that line set for a request to path, or -1.
func (s *cookieStore) sameLine(line, path string) int {
	for i := range s.entries {
		if e := &s.entries[i]; e.raw == line && (e.ownPath || e.path == defaultPath(path)) {
			return i
		}
	}
	return -1
}

func (s *cookieStore) remove(i int) {
	s.entries = append(s.entries[:i], s.entries[i+1:]...)
	s.sent = nil
}

// setOne stores (or removes) one parsed cookie as net/http/cookiejar does.
func (s *cookieStore) setOne(reqPath, line string, c *http.Cookie, now time.Time) {
	e := cookieEntry{name: c.Name, raw: line, maxAge: c.MaxAge}
	e.path, e.ownPath = c.Path, true
	if e.path == "" || e.path[0] != '/' {
		e.path, e.ownPath = defaultPath(reqPath), false
	}
	domain, ok := s.domain(c.Domain)
	if !ok {
		return
	}
	e.domain = domain
	i := -1
	for j := range s.entries {
		if o := &s.entries[j]; o.name == e.name && o.path == e.path && o.domain == e.domain {
			i = j
			break
		}
	}
	remove := false
	switch {
	case c.MaxAge < 0:
		remove = true
	case c.MaxAge > 0:
		e.expires, e.persistent = now.Add(time.Duration(c.MaxAge)*time.Second), true
	case c.Expires.IsZero():
	case !c.Expires.After(now):
		remove = true
	default:
		e.expires, e.persistent = c.Expires, true
	}
	if remove {
		if i >= 0 {
			s.remove(i)
		}
		return
	}
	e.secure = c.Secure && !isLocalhost(e.domain) && !isLoopback(e.domain)
	e.pair = cookiePair(c)
	s.sent = nil
	if i >= 0 {
		s.entries[i] = e
	} else {
		s.entries = append(s.entries, e)
	}
}

// domain is the domain a cookie with this Domain attribute is kept under (the host for none),
// false when net/http/cookiejar refuses it for the session's host.
func (s *cookieStore) domain(attr string) (string, bool) {
	if attr == "" {
		return s.host, true
	}
	if s.ip {
		return s.host, s.host == attr
	}
	d := strings.TrimPrefix(attr, ".")
	if d == "" || d[0] == '.' || d[len(d)-1] == '.' || !printable(d) {
		return "", false
	}
	d = strings.ToLower(d)
	if s.host != d && !(len(s.host) > len(d) && s.host[len(s.host)-len(d)-1] == '.' && strings.HasSuffix(s.host, d)) {
		return "", false
	}
	return d, true
}

// defaultPath is RFC 6265's default-path of a request path.
func defaultPath(path string) string {
	if path == "" || path[0] != '/' {
		return "/"
	}
	i := strings.LastIndexByte(path, '/')
	if i == 0 {
		return "/"
	}
	return path[:i]
}

func isLocalhost(host string) bool {
	host = strings.TrimSuffix(host, ".")
	if i := strings.LastIndexByte(host, '.'); i >= 0 {
		host = host[i+1:]
	}
	return asciiEqualFold(host, "localhost")
}

func isLoopback(host string) bool {
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// cookiePair is the cookie as a Cookie header carries it: its name, "=", and its value, quoted
// when it was or when it has a space or a comma (as net/http's Request.AddCookie writes it).
func cookiePair(c *http.Cookie) string {
	if c.Quoted || strings.ContainsAny(c.Value, " ,") {
		return c.Name + `="` + c.Value + `"`
	}
	return c.Name + "=" + c.Value
}

// printable reports whether s is printable ASCII.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// asciiEqualFold reports whether s is lower (ASCII, lower case) in any ASCII case.
func asciiEqualFold(s, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if b != lower[i] {
			return false
		}
	}
	return true
}
