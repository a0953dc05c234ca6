// Package mailtest runs an SMTP server inside a test (github.com/emersion/go-smtp)
// that requires TLS (STARTTLS, or implicit TLS) and a login, keeps every
// message it accepts, and can be told to refuse the next few, so the tests
// receive the real messages the sender makes.
package mailtest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Username and Password are the login the server accepts.
const (
	Username = "mailer"
	Password = "s3cret pass"
)

// Received is one message the server accepted.
type Received struct {
	From   string // the envelope sender
	To     []string
	Raw    []byte
	Header mail.Header
	Text   string // the text/plain part, decoded, with \n line ends
	HTML   string // the text/html part, decoded, with \n line ends
}

// Server is a running test SMTP server.
type Server struct {
	// URL is the server's address as -smtp-url takes it, with the login.
	URL string
	// TLS is a client configuration that trusts the server's certificate.
	TLS *tls.Config
	// CertPEM is the server's self-signed certificate in PEM, for a client
	// in another process to trust (e.g. as its SSL_CERT_FILE).
	CertPEM []byte

	srv *smtp.Server
	mu  sync.Mutex
	got []Received
	// refuse is how many of the next messages are refused with a
	// temporary error.
	refuse int
}

// Start starts a server on a free local port: STARTTLS on smtp:// or, when
// implicit, TLS from the first byte on smtps://. It stops when the test
// ends.
func Start(t testing.TB, implicit bool) *Server {
	t.Helper()
	cert, pool := selfSigned(t)
	s := &Server{TLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12},
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})}
	s.srv = smtp.NewServer(backend{s})
	s.srv.Domain = "localhost"
	s.srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	s.srv.ReadTimeout, s.srv.WriteTimeout = 10*time.Second, 10*time.Second
	var ln net.Listener
	var err error
	scheme := "smtp"
	if implicit {
		scheme = "smtps"
		ln, err = tls.Listen("tcp", "127.0.0.1:0", s.srv.TLSConfig)
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		t.Fatal(err)
	}
	s.URL = fmt.Sprintf("%s://%s:%s@%s", scheme, Username, strings.ReplaceAll(Password, " ", "%20"), ln.Addr())
	go s.srv.Serve(ln)
	t.Cleanup(func() { s.srv.Close() })
	return s
}

// Refuse makes the server refuse the next n messages with a temporary
// error (451).
func (s *Server) Refuse(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = n
}

// Messages returns the messages accepted so far, in order.
func (s *Server) Messages() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.got...)
}

type backend struct{ s *Server }

func (b backend) NewSession(*smtp.Conn) (smtp.Session, error) { return &session{s: b.s}, nil }

type session struct {
	s      *Server
	authed bool
	from   string
	to     []string
}

func (ss *session) AuthMechanisms() []string { return []string{sasl.Plain} }

func (ss *session) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(identity, user, pass string) error {
		if user != Username || pass != Password {
			return errors.New("invalid login")
		}
		ss.authed = true
		return nil
	}), nil
}

func (ss *session) Mail(from string, _ *smtp.MailOptions) error {
	if !ss.authed {
		return smtp.ErrAuthRequired
	}
	ss.from = from
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	ss.to = append(ss.to, to)
	return nil
}

func (ss *session) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	ss.s.mu.Lock()
	defer ss.s.mu.Unlock()
	if ss.s.refuse > 0 {
		ss.s.refuse--
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try again later"}
	}
	got := Received{From: ss.from, To: ss.to, Raw: raw}
	if err := parse(&got); err != nil {
		return &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: "unparseable: " + err.Error()}
	}
	ss.s.got = append(ss.s.got, got)
	return nil
}

func (ss *session) Reset()        { ss.from, ss.to = "", nil }
func (ss *session) Logout() error { return nil }

// parse reads the headers and the text and HTML parts of r.Raw.
func parse(r *Received) error {
	m, err := mail.ReadMessage(bytes.NewReader(r.Raw))
	if err != nil {
		return err
	}
	r.Header = m.Header
	mt, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
	if err != nil {
		return err
	}
	if !strings.HasPrefix(mt, "multipart/") {
		body, err := decode(m.Body, m.Header.Get("Content-Transfer-Encoding"))
		r.Text = body
		return err
	}
	mr := multipart.NewReader(m.Body, params["boundary"])
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		pt, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		// multipart.Reader decodes quoted-printable itself and drops the header.
		body, err := decode(p, p.Header.Get("Content-Transfer-Encoding"))
		if err != nil {
			return err
		}
		switch pt {
		case "text/plain":
			r.Text = body
		case "text/html":
			r.HTML = body
		}
	}
}

func decode(r io.Reader, cte string) (string, error) {
	if strings.EqualFold(cte, "quoted-printable") {
		r = quotedprintable.NewReader(r)
	}
	b, err := io.ReadAll(r)
	return strings.ReplaceAll(string(b), "\r\n", "\n"), err
}

// selfSigned makes a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mailtest"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
