package toolclient

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"
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
		c, ok := parseSetCookie(line)
		if !ok {
			continue
		}
		s.setOne(path, line, &c, now)
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
func (s *cookieStore) setOne(reqPath, line string, c *setCookie, now time.Time) {
	e := cookieEntry{name: c.name, raw: line, maxAge: c.maxAge}
	e.path, e.ownPath = c.path, true
	if e.path == "" || e.path[0] != '/' {
		e.path, e.ownPath = defaultPath(reqPath), false
	}
	domain, ok := s.domain(c.domain)
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
	case c.maxAge < 0:
		remove = true
	case c.maxAge > 0:
		e.expires, e.persistent = now.Add(time.Duration(c.maxAge)*time.Second), true
	case c.expires.IsZero():
	case !c.expires.After(now):
		remove = true
	default:
		e.expires, e.persistent = c.expires, true
	}
	if remove {
		if i >= 0 {
			s.remove(i)
		}
		return
	}
	e.secure = c.secure && !isLocalhost(e.domain) && !isLoopback(e.domain)
	e.pair = cookiePair(line, c)
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

// setCookie is what the store keeps of a Set-Cookie line.
type setCookie struct {
	name, value string
	quoted      bool
	// nameValue is the line's "name=value" part as it stands, when it is the pair to send.
	nameValue    string
	domain, path string
	maxAge       int // as net/http reads it: < 0 delete, 0 none
	expires      time.Time
	secure       bool
}

// parseSetCookie reads a Set-Cookie line as net/http's ParseSetCookie does, keeping only what a
// cookie jar uses; ok is false where it returns an error.
func parseSetCookie(line string) (c setCookie, ok bool) {
	line = trimSpace(line)
	first, rest, more := strings.Cut(line, ";")
	first = trimSpace(first)
	name, value, found := strings.Cut(first, "=")
	if !found {
		return c, false
	}
	name = trimSpace(name)
	if !isToken(name) {
		return c, false
	}
	if c.value, c.quoted, ok = cookieValue(value, true); !ok {
		return c, false
	}
	c.name = name
	if len(name)+1+len(value) == len(first) {
		c.nameValue = first
	}
	for more {
		var part string
		part, rest, more = strings.Cut(rest, ";")
		part = trimSpace(part)
		if part == "" {
			continue
		}
		attr, val, _ := strings.Cut(part, "=")
		if !printable(attr) {
			continue
		}
		val, _, ok := cookieValue(val, false)
		if !ok {
			continue
		}
		switch {
		case asciiEqualFold(attr, "secure"):
			c.secure = true
		case asciiEqualFold(attr, "domain"):
			c.domain = val
		case asciiEqualFold(attr, "path"):
			c.path = val
		case asciiEqualFold(attr, "max-age"):
			secs, err := strconv.Atoi(val)
			if err != nil || secs != 0 && val[0] == '0' {
				break
			}
			if secs <= 0 {
				secs = -1
			}
			c.maxAge = secs
		case asciiEqualFold(attr, "expires"):
			t, err := time.Parse(time.RFC1123, val)
			if err != nil {
				if t, err = time.Parse("Mon, 02-Jan-2006 15:04:05 MST", val); err != nil {
					c.expires = time.Time{}
					break
				}
			}
			c.expires = t.UTC()
		}
	}
	return c, true
}

// cookiePair is the cookie as a Cookie header carries it: its name, "=", and its value, quoted
// when it was or when it has a space or a comma (as net/http's Request.AddCookie writes it).
func cookiePair(line string, c *setCookie) string {
	if c.quoted || strings.ContainsAny(c.value, " ,") {
		return c.name + `="` + c.value + `"`
	}
	if c.nameValue != "" {
		return c.nameValue // a substring of line: no copy
	}
	return c.name + "=" + c.value
}

// cookieValue is net/http's reading of a cookie or attribute value: without its double quotes
// when allowed and present; ok is false when a byte is not allowed in a cookie value.
func cookieValue(raw string, allowQuote bool) (v string, quoted, ok bool) {
	if allowQuote && len(raw) > 1 && raw[0] == '"' && raw[len(raw)-1] == '"' {
		raw, quoted = raw[1:len(raw)-1], true
	}
	for i := 0; i < len(raw); i++ {
		if b := raw[i]; b < 0x20 || b >= 0x7f || b == '"' || b == ';' || b == '\\' {
			return "", quoted, false
		}
	}
	return raw, quoted, true
}

// trimSpace trims ASCII white space (space, tab, CR, LF) as net/textproto.TrimString does.
func trimSpace(s string) string {
	for len(s) > 0 && isSpace(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

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

// isToken reports whether s is a non-empty HTTP token (RFC 7230), as a cookie name must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0:
		default:
			return false
		}
	}
	return true
}
