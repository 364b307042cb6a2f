package delayq_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// server is a Redis and a delayq node of the tests' own, on free ports,
// with a SQLite journal in a temporary directory.
type server struct {
	dir       string
	redisPort int
	port      int
	url       string
	redis     *exec.Cmd
	node      *exec.Cmd
	nodeLog   *os.File
	exited    chan struct{} // closed when the node has exited
	// tlsCert, tlsKey and caFile: the node serves HTTPS.
	tlsCert, tlsKey, caFile string
}

func delayqBin() string {
	if bin := os.Getenv("DELAYQ_BIN"); bin != "" {
		return bin
	}
	bin, _ := filepath.Abs(filepath.Join("..", "..", "target", "debug", "delayq"))
	return bin
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startServer starts Redis and a node; with a certificate and key the node
// serves HTTPS (caFile signs the certificate).
func startServer(tlsCert, tlsKey, caFile string) (*server, error) {
	dir, err := os.MkdirTemp("", "delayq-go-")
	if err != nil {
		return nil, err
	}
	s := &server{dir: dir, redisPort: freePort(), port: freePort(), tlsCert: tlsCert, tlsKey: tlsKey, caFile: caFile}
	scheme := "http"
	if tlsCert != "" {
		scheme = "https"
	}
	s.url = fmt.Sprintf("%s://127.0.0.1:%d", scheme, s.port)
	s.redis = exec.Command("redis-server", "--port", strconv.Itoa(s.redisPort), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	dieWithTests(s.redis)
	if err := s.redis.Start(); err != nil {
		s.close()
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	if err := s.startNode(); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *server) startNode() error {
	log, err := os.OpenFile(filepath.Join(s.dir, "node.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	s.nodeLog = log
	args := []string{"serve", "--bind", fmt.Sprintf("127.0.0.1:%d", s.port),
		"--redis-url", fmt.Sprintf("redis://127.0.0.1:%d/0", s.redisPort),
		"--database-url", "sqlite://" + filepath.Join(s.dir, "journal.db"), "--shards", "2"}
	if s.tlsCert != "" {
		args = append(args, "--tls-cert", s.tlsCert, "--tls-key", s.tlsKey)
	}
	s.node = exec.Command(delayqBin(), args...)
	s.node.Stdout, s.node.Stderr = log, log
	dieWithTests(s.node)
	if err := s.node.Start(); err != nil {
		return fmt.Errorf("%s: %w", delayqBin(), err)
	}
	exited := make(chan struct{})
	s.exited = exited
	go func(cmd *exec.Cmd) {
		_ = cmd.Wait()
		close(exited)
	}(s.node)

	hc := &http.Client{Timeout: time.Second}
	if s.caFile != "" {
		pem, err := os.ReadFile(s.caFile)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("delayq exited at start; see %s", log.Name())
		default:
		}
		resp, err := hc.Get(s.url + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("delayq did not get ready in 30 s; see %s", log.Name())
}

// stopNode stops the node as an operator would (SIGTERM), killing it after 10 s.
func (s *server) stopNode() {
	if s.node == nil {
		return
	}
	_ = s.node.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.node.Process.Kill()
		<-s.exited
	}
	s.node = nil
	s.nodeLog.Close()
}

func (s *server) close() {
	if s.node != nil {
		_ = s.node.Process.Kill()
		<-s.exited
		s.node = nil
		s.nodeLog.Close()
	}
	if s.redis != nil && s.redis.Process != nil {
		_ = s.redis.Process.Kill()
		_ = s.redis.Wait()
	}
	os.RemoveAll(s.dir)
}

// startTestServer starts a server for one test and closes it at its end.
func startTestServer(t *testing.T, tlsCert, tlsKey, caFile string) *server {
	t.Helper()
	s, err := startServer(tlsCert, tlsKey, caFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
