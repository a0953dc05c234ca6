package main

import (
	"flag"
	"net/url"

	"github.com/gpumarket/gpumarket/mail"
)

// mailSettings are serve's outgoing mail settings.
type mailSettings struct {
	smtpURL, from *string
}

// mailFlags defines the mail flags on fs, defaulting from the environment.
func mailFlags(fs *flag.FlagSet, getenv func(string) string) *mailSettings {
	return &mailSettings{
		smtpURL: fs.String("smtp-url", getenv("GPUMARKET_SMTP_URL"), "SMTP server for outgoing mail: smtp://user:password@host:587 (STARTTLS) or smtps://user:password@host:465 (implicit TLS) (env GPUMARKET_SMTP_URL; default none: mail stays in the outbox, readable at /admin/mail)"),
		from:    fs.String("mail-from", getenv("GPUMARKET_MAIL_FROM"), `sender of outgoing mail, e.g. "GPU Market <gpus@example.com>" (env GPUMARKET_MAIL_FROM; required with -smtp-url)`),
	}
}

// sender builds the mail sender, or nil when no SMTP server is configured.
func (f *mailSettings) sender(baseURL string) (*mail.Sender, error) {
	if *f.smtpURL == "" {
		return nil, nil
	}
	return mail.New(mail.Config{URL: *f.smtpURL, From: *f.from, BaseURL: baseURL})
}

// redactSMTP is the SMTP URL without its password, for logs.
func redactSMTP(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable)"
	}
	return u.Redacted()
}
