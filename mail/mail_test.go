package mail_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/mail"
	"github.com/gpumarket/gpumarket/mail/mailtest"
)

func TestSendBothPartsAndHeaders(t *testing.T) {
	for _, implicit := range []bool{false, true} {
		name := "starttls"
		if implicit {
			name = "implicit-tls"
		}
		t.Run(name, func(t *testing.T) {
			srv := mailtest.Start(t, implicit)
			s, err := mail.New(mail.Config{URL: srv.URL, From: "GPU Market <gpus@market.example>", BaseURL: "https://market.example/", TLS: srv.TLS})
			if err != nil {
				t.Fatal(err)
			}
			date := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
			msgs := []mail.Message{
				{ID: 41, To: "ada@example.com", Subject: "Refund sent", Body: "A refund of $12.00 <script>alert(1)</script> & more.",
					Path: "/reservations/7", Notification: true, Date: date},
				{ID: 42, To: "bob@example.com", Subject: "Reset your password", Body: "Use this link within an hour.", Path: "/reset/abc", Date: date},
			}
			for i, err := range s.Send(context.Background(), msgs) {
				if err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
			}
			got := srv.Messages()
			if len(got) != 2 {
				t.Fatalf("server received %d messages, want 2", len(got))
			}
			n, sec := got[0], got[1]
			if n.From != "gpus@market.example" || len(n.To) != 1 || n.To[0] != "ada@example.com" {
				t.Errorf("envelope %q → %v", n.From, n.To)
			}
			for _, c := range []struct{ header, want string }{
				{"From", `"GPU Market" <gpus@market.example>`},
				{"To", "<ada@example.com>"},
				{"Subject", "Refund sent"},
				{"Message-Id", "<outbox-41@market.example>"},
				{"List-Unsubscribe", "<https://market.example/account/mail>"},
				{"Date", "Tue, 01 Dec 2026 09:00:00 +0000"},
			} {
				if g := n.Header.Get(c.header); g != c.want {
					t.Errorf("notification %s = %q, want %q", c.header, g, c.want)
				}
			}
			if !strings.Contains(n.Text, "A refund of $12.00 <script>alert(1)</script> & more.") ||
				!strings.Contains(n.Text, "\nhttps://market.example/reservations/7\n") ||
				!strings.Contains(n.Text, "https://market.example/account/mail") {
				t.Errorf("text part:\n%s", n.Text)
			}
			if strings.Contains(n.HTML, "<script>") || !strings.Contains(n.HTML, "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more.") ||
				!strings.Contains(n.HTML, `<a href="https://market.example/reservations/7">`) ||
				!strings.Contains(n.HTML, `<a href="https://market.example/account/mail">`) {
				t.Errorf("html part:\n%s", n.HTML)
			}
			if sec.Header.Get("List-Unsubscribe") != "" || sec.Header.Get("Message-Id") != "<outbox-42@market.example>" ||
				sec.Header.Get("To") != "<bob@example.com>" || sec.Header.Get("Subject") != "Reset your password" {
				t.Errorf("security mail headers: %v", sec.Header)
			}
			if !strings.Contains(sec.Text, "https://market.example/reset/abc") || !strings.Contains(sec.Text, "always sent") ||
				strings.Contains(sec.Text, "/account/mail") || !strings.Contains(sec.HTML, `href="https://market.example/reset/abc"`) {
				t.Errorf("security mail:\n%s\n%s", sec.Text, sec.HTML)
			}
		})
	}
}

func TestSendReportsEachFailure(t *testing.T) {
	srv := mailtest.Start(t, false)
	s, err := mail.New(mail.Config{URL: srv.URL, From: "gpus@market.example", BaseURL: "https://market.example", TLS: srv.TLS})
	if err != nil {
		t.Fatal(err)
	}
	srv.Refuse(1)
	msgs := []mail.Message{{ID: 1, To: "a@example.com", Subject: "One", Body: "1"}, {ID: 2, To: "b@example.com", Subject: "Two", Body: "2"}}
	errs := s.Send(context.Background(), msgs)
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "451") || errs[1] != nil {
		t.Fatalf("errors %v; want the first refused (451), the second sent", errs)
	}
	if got := srv.Messages(); len(got) != 1 || got[0].Header.Get("Subject") != "Two" {
		t.Fatalf("received %d messages", len(got))
	}

	// A wrong password fails every message, and nothing is received.
	bad, err := mail.New(mail.Config{URL: strings.Replace(srv.URL, "s3cret", "wrong", 1), From: "gpus@market.example", TLS: srv.TLS})
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range bad.Send(context.Background(), msgs) {
		if err == nil {
			t.Errorf("message %d sent with a wrong password", i)
		}
	}
	if got := srv.Messages(); len(got) != 1 {
		t.Fatalf("received %d messages after a failed login, want still 1", len(got))
	}
}

func TestNewRefusesBadSettings(t *testing.T) {
	for _, c := range []struct{ url, from, want string }{
		{"http://host", "a@b.example", "scheme"},
		{"smtp://", "a@b.example", "must look like"},
		{"smtp://host:99999", "a@b.example", "port"},
		{"smtp://host:587", "", "sender address"},
		{"smtp://host:587", "not an address", "sender address"},
	} {
		_, err := mail.New(mail.Config{URL: c.url, From: c.from})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q, %q) = %v, want an error about %s", c.url, c.from, err, c.want)
		}
	}
	s, err := mail.New(mail.Config{URL: "smtps://u:p@mail.example", From: "a@b.example"})
	if err != nil || s.Server() != "mail.example:465" {
		t.Fatalf("smtps default port: %v, %v", s, err)
	}
}
