// Package mail sends the marketplace's e-mail through an SMTP server and
// composes each message's text and HTML parts. It knows nothing of the
// database: the workflow hands it messages from the outbox and records what
// happened, as billing talks to Stripe for it.
package mail

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	gomail "github.com/wneessen/go-mail"
)

// PreferencesPath is where a person changes which e-mail they receive; the
// List-Unsubscribe header of notification mail points there.
const PreferencesPath = "/account/mail"

// Message is one e-mail to send or show.
type Message struct {
	// ID is the message's outbox id; its Message-ID header is derived from
	// it (MessageID), so a message sent twice (a crash between sending and
	// recording it) carries the same Message-ID both times.
	ID      int64
	To      string
	Subject string
	Body    string // plain text, the notification's message
	// Path is the message's link, relative to the base URL ("" for none).
	Path string
	// Notification is true for notification mail (which a person may turn
	// off, so it says how and carries List-Unsubscribe) and false for
	// security mail (always sent).
	Notification bool
	Date         time.Time
}

// Composer renders messages for one server: links are made absolute with
// its base URL.
type Composer struct {
	BaseURL string // e.g. "https://gpus.example.com"
}

// Link is the message's link made absolute ("" when it has none).
func (c Composer) Link(m Message) string {
	if m.Path == "" {
		return ""
	}
	return c.absolute(m.Path)
}

// PreferencesURL is the absolute address of the mail preferences.
func (c Composer) PreferencesURL() string { return c.absolute(PreferencesPath) }

func (c Composer) absolute(path string) string {
	return strings.TrimRight(c.BaseURL, "/") + "/" + strings.TrimLeft(path, "/")
}

// MessageID is the Message-ID (without its angle brackets) of outbox message
// id: stable, so a repeated send is recognisable as the same message.
func (c Composer) MessageID(id int64) string {
	host := "gpumarket.invalid"
	if u, err := url.Parse(c.BaseURL); err == nil && u.Hostname() != "" {
		host = u.Hostname()
	}
	return fmt.Sprintf("outbox-%d@%s", id, host)
}

// Text is the message's plain-text part.
func (c Composer) Text(m Message) string {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(m.Body))
	b.WriteString("\n")
	if link := c.Link(m); link != "" {
		fmt.Fprintf(&b, "\n%s\n", link)
	}
	b.WriteString("\n-- \nGPU Market\n")
	if m.Notification {
		fmt.Fprintf(&b, "You receive this e-mail because of your notification settings. Choose which e-mail you get: %s\n", c.PreferencesURL())
	} else {
		b.WriteString("This is a security message about your account; it is always sent.\n")
	}
	return b.String()
}

var htmlPart = template.Must(template.New("mail").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Subject}}</title></head>
<body style="font-family: sans-serif; line-height: 1.5; color: #1a1a1a;">
{{range .Paragraphs}}<p>{{.}}</p>
{{end}}{{if .Link}}<p><a href="{{.Link}}">{{.Link}}</a></p>
{{end}}<hr>
<p style="font-size: 0.9em; color: #555;">GPU Market.
{{if .Notification}}You receive this e-mail because of your notification settings. <a href="{{.Preferences}}">Choose which e-mail you get</a>.
{{else}}This is a security message about your account; it is always sent.
{{end}}</p>
</body></html>
`))

// HTML is the message's HTML part; every value in it is escaped.
func (c Composer) HTML(m Message) (string, error) {
	var paras []string
	for _, p := range strings.Split(strings.TrimSpace(m.Body), "\n\n") {
		if p = strings.TrimSpace(p); p != "" {
			paras = append(paras, p)
		}
	}
	var b bytes.Buffer
	err := htmlPart.Execute(&b, struct {
		Subject, Link, Preferences string
		Paragraphs                 []string
		Notification               bool
	}{m.Subject, c.Link(m), c.PreferencesURL(), paras, m.Notification})
	if err != nil {
		return "", fmt.Errorf("mail: render html: %w", err)
	}
	return b.String(), nil
}

// Config is the sender's configuration, from the process owner.
type Config struct {
	// URL is the SMTP server: smtp://user:pass@host:587 (STARTTLS,
	// required) or smtps://user:pass@host:465 (implicit TLS). The user and
	// password may be omitted for a server that needs no login.
	URL string
	// From is the sender's address, e.g. "GPU Market <gpus@example.com>".
	From string
	// BaseURL is the server's public address, for links.
	BaseURL string
	// TLS, if set, replaces the default TLS configuration (tests use it to
	// trust their own certificate).
	TLS *tls.Config
	// Timeout bounds connecting and each command; 0 means 30 s.
	Timeout time.Duration
}

// Sender sends messages through one SMTP server.
type Sender struct {
	compose  Composer
	from     string
	host     string
	port     int
	implicit bool
	user     string
	pass     string
	tls      *tls.Config
	timeout  time.Duration
}

// New checks cfg and returns a sender. It does not connect.
func New(cfg Config) (*Sender, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || u.Hostname() == "" {
		return nil, errors.New("mail: the SMTP URL must look like smtp://user:password@host:587 or smtps://user:password@host:465")
	}
	s := &Sender{compose: Composer{BaseURL: cfg.BaseURL}, from: cfg.From, host: u.Hostname(), tls: cfg.TLS, timeout: cfg.Timeout}
	switch u.Scheme {
	case "smtp":
		s.port = 587
	case "smtps":
		s.port, s.implicit = 465, true
	default:
		return nil, fmt.Errorf("mail: SMTP URL scheme %q: use smtp:// (STARTTLS) or smtps:// (implicit TLS)", u.Scheme)
	}
	if p := u.Port(); p != "" {
		if s.port, err = strconv.Atoi(p); err != nil || s.port < 1 || s.port > 65535 {
			return nil, fmt.Errorf("mail: SMTP URL port %q is not a port number", p)
		}
	}
	if u.User != nil {
		s.user = u.User.Username()
		s.pass, _ = u.User.Password()
	}
	if cfg.From == "" {
		return nil, errors.New("mail: a sender address (-mail-from) is needed to send mail")
	}
	if err := gomail.NewMsg().From(cfg.From); err != nil {
		return nil, fmt.Errorf("mail: sender address %q: %w", cfg.From, err)
	}
	if s.tls == nil {
		s.tls = &tls.Config{ServerName: s.host, MinVersion: tls.VersionTLS12}
	}
	if s.timeout <= 0 {
		s.timeout = 30 * time.Second
	}
	return s, nil
}

// From is the sender's address as configured.
func (s *Sender) From() string { return s.from }

// Server names the SMTP server (host:port), without credentials, for logs.
func (s *Sender) Server() string { return net.JoinHostPort(s.host, strconv.Itoa(s.port)) }

// Send sends msgs over one connection and returns one error per message
// (nil for each that the server accepted). If the server cannot be reached
// or refuses the login, every message gets that error.
func (s *Sender) Send(ctx context.Context, msgs []Message) []error {
	errs := make([]error, len(msgs))
	built := make([]*gomail.Msg, len(msgs))
	pending := 0
	for i, m := range msgs {
		if built[i], errs[i] = s.build(m); errs[i] == nil {
			pending++
		}
	}
	if pending == 0 {
		return errs
	}
	opts := []gomail.Option{gomail.WithPort(s.port), gomail.WithTimeout(s.timeout), gomail.WithTLSConfig(s.tls)}
	if s.implicit {
		opts = append(opts, gomail.WithSSL())
	} else {
		// A password never crosses the network in the clear.
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSMandatory))
	}
	if s.user != "" {
		opts = append(opts, gomail.WithSMTPAuth(gomail.SMTPAuthAutoDiscover), gomail.WithUsername(s.user), gomail.WithPassword(s.pass))
	}
	c, err := gomail.NewClient(s.host, opts...)
	if err == nil {
		err = c.DialWithContext(ctx)
	}
	if err != nil {
		err = fmt.Errorf("mail: connect to %s: %w", s.Server(), err)
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	defer c.Close()
	for i, gm := range built {
		if errs[i] != nil {
			continue
		}
		// A message the server took counts as sent even if the reset after
		// it failed.
		if err := c.Send(gm); err != nil && !gm.IsDelivered() {
			errs[i] = fmt.Errorf("mail: send to %s: %w", msgs[i].To, err)
		}
	}
	return errs
}

// build turns m into a go-mail message with both parts and its headers.
func (s *Sender) build(m Message) (*gomail.Msg, error) {
	gm := gomail.NewMsg(gomail.WithNoDefaultUserAgent())
	if err := gm.From(s.from); err != nil {
		return nil, fmt.Errorf("mail: sender address: %w", err)
	}
	if err := gm.To(m.To); err != nil {
		return nil, fmt.Errorf("mail: recipient address %q: %w", m.To, err)
	}
	gm.Subject(m.Subject)
	gm.SetMessageIDWithValue(s.compose.MessageID(m.ID))
	date := m.Date
	if date.IsZero() {
		date = time.Now()
	}
	gm.SetDateWithValue(date)
	if m.Notification {
		gm.SetGenHeader(gomail.HeaderListUnsubscribe, "<"+s.compose.PreferencesURL()+">")
	}
	html, err := s.compose.HTML(m)
	if err != nil {
		return nil, err
	}
	gm.SetBodyString(gomail.TypeTextPlain, s.compose.Text(m))
	gm.AddAlternativeString(gomail.TypeTextHTML, html)
	return gm, nil
}
