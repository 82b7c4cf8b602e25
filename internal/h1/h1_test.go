package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/testnet"
)

// countingServer is an httptest server that counts the connections it accepted.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func client(tr *Transport) *http.Client { return &http.Client{Transport: tr} }

func post(t *testing.T, c *http.Client, url, body string) (int, string) {
	t.Helper()
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestReusesConnections(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.RequestURI(), b)
	})
	tr := New(Options{})
	c := client(tr)
	for i := range 20 {
		code, got := post(t, c, srv.URL+"/v1/chat?i="+fmt.Sprint(i), `{"n":1}`)
		if want := fmt.Sprintf(`POST /v1/chat?i=%d {"n":1}`, i); code != 200 || got != want {
			t.Fatalf("answer %d: %d %q, want 200 %q", i, code, got, want)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("20 requests one after another opened %d connections, want 1", n)
	}
	if n := tr.IdleConns(); n != 1 {
		t.Errorf("idle connections: %d, want 1", n)
	}
	tr.CloseIdleConnections()
	if n := tr.IdleConns(); n != 0 {
		t.Errorf("idle connections after CloseIdleConnections: %d", n)
	}
}

// The answers' framings net/http's server writes (a length, chunks, none for HEAD and 204)
// all leave the connection reusable.
func TestFramings(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/length":
			w.Header().Set("Content-Length", "5")
			io.WriteString(w, "hello")
		case "/chunked":
			for range 3 {
				io.WriteString(w, "chunk ")
				w.(http.Flusher).Flush()
			}
		case "/big":
			io.WriteString(w, big)
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.Header().Set("Content-Length", "7")
		}
	})
	c := client(New(Options{}))
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/length", "hello"},
		{"GET", "/chunked", "chunk chunk chunk "},
		{"GET", "/big", big},
		{"GET", "/empty", ""},
		{"HEAD", "/head", ""},
		{"GET", "/length", "hello"},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != tc.want {
			t.Fatalf("%s %s: %d bytes, %v; want %d bytes", tc.method, tc.path, len(b), err, len(tc.want))
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("six answers of every framing opened %d connections, want 1", n)
	}
}

// What reaches the server is what net/http's Transport sends, but for the gzip it asks for
// (and would undo): the same request line, headers and body.
func TestSendsWhatNetHTTPSends(t *testing.T) {
	capture := func(rt http.RoundTripper) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		got := make(chan string, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				got <- err.Error()
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			req, err := http.ReadRequest(br)
			if err != nil {
				got <- err.Error()
				return
			}
			var raw bytes.Buffer
			req.Header.Del("Accept-Encoding")
			body, _ := io.ReadAll(req.Body)
			fmt.Fprintf(&raw, "%s %s %s\nHost: %s\nContent-Length: %d\n", req.Method, req.RequestURI, req.Proto,
				strings.Replace(req.Host, ln.Addr().String(), "ADDR", 1), req.ContentLength)
			req.Header.Write(&raw)
			raw.Write(body)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			got <- raw.String()
		}()
		req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/v1/chat/completions?api-version=1", strings.NewReader(`{"model":"m"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer k")
		req.Header.Add("X-Many", "a")
		req.Header.Add("X-Many", "b")
		req.AddCookie(&http.Cookie{Name: "session", Value: "s1"})
		resp, err := (&http.Client{Transport: rt}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		return <-got
	}
	want := capture(&http.Transport{})
	got := capture(New(Options{}))
	if got != want {
		t.Errorf("sent\n%s\nnet/http's Transport sends\n%s", got, want)
	}
	if !strings.Contains(want, "Authorization: Bearer k") || !strings.Contains(want, `{"model":"m"}`) {
		t.Fatalf("capture lost the request: %q", want)
	}
}

// A server that closes a connection while it is idle (a keep-alive timeout, uvicorn's is
// 5 s) is not sent the next request on it: the request goes on a new connection and is
// answered.
func TestIdleConnectionClosedByServer(t *testing.T) {
	closed := make(chan struct{}, 4)
	url := testnet.Raw(t, func(n int, c net.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n%d", n)
		if n == 1 {
			c.(*net.TCPConn).CloseWrite() // the end of the stream, as a server closing an idle connection
			closed <- struct{}{}
			io.Copy(io.Discard, c)
			return
		}
		io.Copy(io.Discard, c)
	})
	c := client(New(Options{}))
	if _, got := post(t, c, url, "a"); got != "1" {
		t.Fatalf("first answer %q", got)
	}
	<-closed
	// The end of the stream is on its way; a POST is not idempotent, so it must not be
	// sent on the closed connection at all.
	time.Sleep(20 * time.Millisecond)
	if _, got := post(t, c, url, "b"); got != "2" {
		t.Fatalf("second answer %q: want it from a second connection", got)
	}
}

// A reused connection that takes the request and ends without an answer: a GET is sent again
// on a new connection, a POST is not (the server may have acted on it), as net/http does.
func TestReusedConnectionEndsWithoutAnswer(t *testing.T) {
	for _, method := range []string{"GET", "POST"} {
		t.Run(method, func(t *testing.T) {
			var requests atomic.Int64
			url := testnet.Raw(t, func(n int, c net.Conn) {
				br := bufio.NewReader(c)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					requests.Add(1)
					if n == 1 && i == 1 {
						return // the second request on the first connection: no answer
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			})
			c := client(New(Options{}))
			do := func() error {
				req, _ := http.NewRequest(method, url, strings.NewReader("body"))
				resp, err := c.Do(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				_, err = io.ReadAll(resp.Body)
				return err
			}
			if err := do(); err != nil {
				t.Fatal(err)
			}
			err := do()
			switch method {
			case "GET":
				if err != nil || requests.Load() != 3 {
					t.Errorf("GET: %v after %d requests; want an answer from a second connection (3 requests)", err, requests.Load())
				}
			case "POST":
				if err == nil || requests.Load() != 2 {
					t.Errorf("POST: %v after %d requests; want an error and no second send", err, requests.Load())
				}
			}
		})
	}
}

// A context that ends while the request waits, or while the body is read, ends it at once
// with the context's error, and the connection is closed, not reused.
func TestContextEndsTheRequest(t *testing.T) {
	url, accepted := testnet.Silent(t)
	tr := New(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader("x"))
	_, err := client(tr).Do(req)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting on a silent server: %v, want context.Canceled", err)
	}
	if tr.IdleConns() != 0 || accepted() != 1 {
		t.Errorf("idle %d, accepted %d: want the connection closed", tr.IdleConns(), accepted())
	}

	// The answer's head comes, then nothing.
	hang := testnet.Raw(t, func(_ int, c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
		io.Copy(io.Discard, c)
	})
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, "GET", hang, nil)
	resp, err := client(tr).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "abc" || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("body read %q, %v; want \"abc\" and context.DeadlineExceeded", b, err)
	}
	if tr.IdleConns() != 0 {
		t.Errorf("a connection whose body was cut off was kept")
	}
}

// A body closed before its end, an answer that asks to close, or an HTTP/1.0 answer leave
// no connection behind; the next request opens another.
func TestConnectionsNotReused(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		io.WriteString(w, strings.Repeat("y", 64<<10))
	})
	tr := New(Options{})
	c := client(tr)
	get := func(path string, read bool) {
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		if read {
			io.ReadAll(resp.Body)
		} else {
			resp.Body.Read(make([]byte, 10))
		}
		resp.Body.Close()
		if _, err := resp.Body.Read(make([]byte, 1)); err == nil || err == io.EOF {
			t.Errorf("a read after Close gave %v, want an error", err)
		}
	}
	get("/a", false)
	get("/a", true)
	get("/close", true)
	get("/a", true)
	if n := conns.Load(); n != 3 {
		t.Errorf("connections: %d, want 3 (the one closed early and the one the server closed are not reused)", n)
	}
}

// Broken answers are errors, and their connections are not reused.
func TestBrokenAnswers(t *testing.T) {
	for _, tc := range []struct{ name, raw string }{
		{"malformed status line", "HTP/1.1 OK\r\n\r\n"},
		{"cut mid-head", "HTTP/1.1 200 OK\r\nContent-Len"},
		{"cut mid-body", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"},
		{"nothing", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := testnet.Raw(t, func(_ int, c net.Conn) {
				http.ReadRequest(bufio.NewReader(c))
				io.WriteString(c, tc.raw)
			})
			tr := New(Options{})
			resp, err := client(tr).Get(url)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if err == nil {
				t.Fatalf("no error")
			}
			if tr.IdleConns() != 0 {
				t.Errorf("kept a connection after %v", err)
			}
		})
	}
}

// A connection reset mid-answer is an error (the simulator's chaos does this with SO_LINGER 0).
func TestResetMidBody(t *testing.T) {
	url := testnet.Raw(t, func(_ int, c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart")
		time.Sleep(10 * time.Millisecond)
		c.(*net.TCPConn).SetLinger(0)
	})
	resp, err := client(New(Options{})).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("read %q and no error after a reset", b)
	}
}

func TestInformationalAnswerSkipped(t *testing.T) {
	url := testnet.Raw(t, func(_ int, c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\ndone")
	})
	resp, err := client(New(Options{})).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 || string(b) != "done" {
		t.Errorf("%d %q, want 201 \"done\"", resp.StatusCode, b)
	}
}

func TestRefusesWhatItCannotSend(t *testing.T) {
	for _, raw := range []string{"https://example.com/", "unix:///tmp/x"} {
		req, _ := http.NewRequest("GET", raw, nil)
		if CanTake(req) {
			t.Errorf("CanTake(%s) = true", raw)
		}
		if _, err := New(Options{}).RoundTrip(req); err == nil {
			t.Errorf("RoundTrip(%s) sent it", raw)
		}
	}
	req, _ := http.NewRequest("POST", "http://127.0.0.1:1/", strings.NewReader("x"))
	req.Header.Set("Expect", "100-continue")
	if CanTake(req) {
		t.Errorf("CanTake took an Expect request")
	}
	if _, err := client(New(Options{})).Get(testnet.ClosedPort(t)); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("a closed port: %v, want connection refused", err)
	}
}

// Many goroutines at once: every answer is its request's, and the connections opened are
// at most the goroutines (the pool hands a connection to one request at a time).
func TestConcurrentRequests(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	tr := New(Options{MaxIdlePerHost: 16})
	c := client(tr)
	const workers, each = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				want := fmt.Sprintf("%d-%d-%s", w, i, strings.Repeat("z", (w*i)%5000))
				resp, err := c.Post(srv.URL, "text/plain", strings.NewReader(want))
				if err != nil {
					errs <- err
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(b) != want {
					errs <- fmt.Errorf("answer %q..., %v, want %q...", b[:min(len(b), 10)], err, want[:10])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := conns.Load(); n > workers {
		t.Errorf("%d connections for %d goroutines", n, workers)
	}
	if n := tr.IdleConns(); n > 16 {
		t.Errorf("%d idle connections kept, limit 16", n)
	}
}

// Idle connections past MaxIdlePerHost are closed, and one idle past IdleTimeout is not
// reused.
func TestIdleLimits(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tr := New(Options{MaxIdlePerHost: 2, IdleTimeout: 30 * time.Millisecond})
	c := client(tr)
	var bodies []io.ReadCloser
	for range 4 { // four requests in flight at once: four connections
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, resp.Body)
	}
	for _, b := range bodies {
		io.ReadAll(b)
		b.Close()
	}
	if n := tr.IdleConns(); n != 2 {
		t.Errorf("idle after 4 at once with a limit of 2: %d", n)
	}
	time.Sleep(60 * time.Millisecond)
	post(t, c, srv.URL, "")
	if n := conns.Load(); n != 5 {
		t.Errorf("connections: %d, want 5 (the idle ones timed out)", n)
	}
}

// A server that answers before it has read the whole request, and closes the connection (Go's
// server does past 256 KiB unread; a 413, a verifier that ignores what it is sent): the
// answer is the request's, not the write's broken pipe, as with net/http, which reads while
// it writes.
func TestEarlyAnswerToALargeRequest(t *testing.T) {
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		io.WriteString(w, `{"error":"too large"}`)
	})
	tr := New(Options{})
	for _, rt := range []http.RoundTripper{&http.Transport{}, tr} {
		for i := range 3 {
			resp, err := (&http.Client{Transport: rt}).Post(srv.URL+"/verify", "application/json", bytes.NewReader(bytes.Repeat([]byte("x"), 16<<20)))
			if err != nil {
				t.Fatalf("%T, request %d: %v", rt, i, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || string(b) != `{"error":"too large"}` || err != nil {
				t.Errorf("%T, request %d: %d %q %v", rt, i, resp.StatusCode, b, err)
			}
		}
	}
	if n := tr.IdleConns(); n != 0 {
		t.Errorf("kept %d connections the server closed", n)
	}
}

// An answer whose head never ends is cut at MaxHeadBytes, not read into memory without end.
func TestEndlessHead(t *testing.T) {
	url := testnet.Raw(t, func(_ int, c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := []byte("X-Filler: " + strings.Repeat("y", 1000) + "\r\n")
		for {
			if _, err := c.Write(line); err != nil {
				return
			}
		}
	})
	_, err := client(New(Options{})).Get(url)
	if err == nil || !strings.Contains(err.Error(), "head is over") {
		t.Fatalf("an endless head: %v", err)
	}
}

// A server that answers a large request early and then neither reads the rest nor closes:
// the answer is returned (net/http's too), not a write that waits for the request's deadline.
func TestEarlyAnswerServerStopsReading(t *testing.T) {
	ended := make(chan struct{})
	url := testnet.Raw(t, func(_ int, c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 9\r\n\r\ntoo large")
		<-ended // reads nothing more until the test ends
	})
	t.Cleanup(func() { close(ended) })
	tr := New(Options{})
	for _, rt := range []http.RoundTripper{&http.Transport{}, tr} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(make([]byte, 64<<20)))
		resp, err := (&http.Client{Transport: rt}).Do(req)
		if err != nil {
			cancel()
			t.Fatalf("%T: %v", rt, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || string(b) != "too large" || err != nil {
			t.Errorf("%T: %d %q %v", rt, resp.StatusCode, b, err)
		}
	}
	if n := tr.IdleConns(); n != 0 {
		t.Errorf("kept %d connections whose request was not all sent", n)
	}
}

// A request that asks to close its connection (req.Close, or a Connection header naming close
// among its tokens) does not leave it in the pool.
func TestRequestAsksToClose(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tr := New(Options{})
	for _, set := range []func(*http.Request){
		func(r *http.Request) { r.Close = true },
		func(r *http.Request) { r.Header.Set("Connection", "keep-alive, Close") },
	} {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		set(req)
		resp, err := client(tr).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if n := tr.IdleConns(); n != 0 {
			t.Errorf("%d idle connections after a request that asked to close", n)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("connections: %d, want 2", n)
	}
}
