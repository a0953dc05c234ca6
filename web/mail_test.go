package web

import (
	"context"
	"html"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/gpumarket/gpumarket/mail"
	"github.com/gpumarket/gpumarket/mail/mailtest"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
	"github.com/gpumarket/gpumarket/workflow"
)

// newMailApp serves the real Echo instance at a base URL that is its own
// address, with a workflow that sends mail through srv, so the links in a
// received message can be followed.
func newMailApp(t *testing.T, srv *mailtest.Server) (*testApp, *workflow.Service) {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, pgtest.DSN(t, filepath.Join(t.TempDir(), "web.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	sender, err := mail.New(mail.Config{URL: srv.URL, From: "GPU Market <gpus@market.example>", BaseURL: base, TLS: srv.TLS})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	now := func() time.Time { return testNow }
	wf, err := workflow.New(ctx, workflow.Config{PlatformFeeBP: 1000, Now: now, Mail: sender, BaseURL: base,
		SessionKey: []byte(strings.Repeat("k", 32)), PasswordCost: bcrypt.MinCost}, db, log)
	if err != nil {
		t.Fatal(err)
	}
	h, e, err := New(ctx, Config{BaseURL: base, SessionKey: []byte(strings.Repeat("k", 32)), PasswordCost: bcrypt.MinCost, Now: now, Workflow: wf}, db, log)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(e)
	hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	t.Cleanup(hs.Close)
	return &testApp{t: t, srv: hs, db: db, handler: h}, wf
}

var hrefRe = regexp.MustCompile(`<a href="([^"]+)"`)

// The real message a notification sends: headers, both parts, and links
// that work when followed against the server; security mail carries no
// List-Unsubscribe.
func TestMailReceivedAndItsLinksWork(t *testing.T) {
	ctx := context.Background()
	srv := mailtest.Start(t, false)
	app, wf := newMailApp(t, srv)
	buyer := app.client()
	buyer.signUp("ada@example.com", false)
	id := buyer.userID()
	wf.Tick(ctx, testNow) // sign-up's own mail (address verification) goes first
	before := len(srv.Messages())

	if err := app.db.Notify(ctx, store.Notification{UserID: id, Kind: store.NotifyRefundSent, Message: "A refund of $12.00 <for you> is on its way.",
		URL: "/notifications", CreatedAt: testNow}); err != nil {
		t.Fatal(err)
	}
	if err := app.db.QueueMail(ctx, store.OutboxMail{UserID: id, To: "ada@example.com", Kind: store.MailPasswordReset, Subject: "Reset your password",
		Body: "Someone asked to reset your password.", URLPath: "/login", CreatedAt: testNow}); err != nil {
		t.Fatal(err)
	}
	wf.Tick(ctx, testNow)
	got := srv.Messages()[before:]
	if len(got) != 2 {
		t.Fatalf("received %d messages, want 2", len(got))
	}
	base := app.srv.URL
	n, sec := got[0], got[1]
	if n.Header.Get("From") != `"GPU Market" <gpus@market.example>` || n.Header.Get("To") != "<ada@example.com>" ||
		n.Header.Get("Subject") != "Refund sent" || !strings.HasPrefix(n.Header.Get("Message-Id"), "<outbox-") ||
		n.Header.Get("List-Unsubscribe") != "<"+base+"/account/mail>" {
		t.Fatalf("notification headers %v", n.Header)
	}
	if !strings.Contains(n.Text, "A refund of $12.00 <for you> is on its way.") || !strings.Contains(n.Text, base+"/notifications\n") ||
		!strings.Contains(n.HTML, "A refund of $12.00 &lt;for you&gt; is on its way.") {
		t.Fatalf("notification parts:\n%s\n%s", n.Text, n.HTML)
	}
	if sec.Header.Get("List-Unsubscribe") != "" || sec.Header.Get("Subject") != "Reset your password" || !strings.Contains(sec.Text, base+"/login") {
		t.Fatalf("security mail: %v\n%s", sec.Header, sec.Text)
	}

	// Every link of the HTML part, followed by the person it was sent to.
	links := hrefRe.FindAllStringSubmatch(n.HTML, -1)
	if len(links) != 2 {
		t.Fatalf("links in the html part: %v", links)
	}
	for _, l := range links {
		if !strings.HasPrefix(l[1], base+"/") {
			t.Fatalf("link %q is not absolute on %s", l[1], base)
		}
		r := buyer.get(strings.TrimPrefix(l[1], base))
		if r.status != http.StatusOK {
			t.Fatalf("GET %s: %d", l[1], r.status)
		}
	}
	if r := buyer.get("/account/mail"); !strings.Contains(r.body, `data-testid="mail-preferences"`) {
		t.Fatal("the List-Unsubscribe target is not the preferences form")
	}
}

// Turning a kind off stops its mail; security mail still goes.
func TestMailPreferences(t *testing.T) {
	ctx := context.Background()
	srv := mailtest.Start(t, false)
	app, wf := newMailApp(t, srv)
	c := app.client()
	c.signUp("ada@example.com", false)
	id := c.userID()

	r := c.get("/account/mail")
	if r.status != http.StatusOK || strings.Count(r.body, `type="checkbox"`) != len(store.MailedNotificationKinds()) ||
		strings.Count(r.body, `checked`) != len(store.MailedNotificationKinds()) || !strings.Contains(r.body, `<label class="check" for="f-mail_refund_sent">`) ||
		!strings.Contains(r.body, "Security mail is always sent") {
		t.Fatalf("preferences form (%d):\n%s", r.status, r.body)
	}
	// Without the CSRF token nothing changes.
	if r := c.postRaw("/account/mail", url.Values{}); r.status != http.StatusForbidden {
		t.Fatalf("POST without CSRF: %d", r.status)
	}
	form := url.Values{}
	for _, k := range store.MailedNotificationKinds() {
		if k != store.NotifyRefundSent {
			form.Set("mail_"+k, "1")
		}
	}
	r = c.post("/account/mail", "/account/mail", form)
	if r.status != http.StatusSeeOther || r.location != "/account/mail" {
		t.Fatalf("save: %d → %q", r.status, r.location)
	}
	r = c.get("/account/mail")
	if !strings.Contains(r.body, "E-mail preferences saved.") || strings.Count(r.body, `checked`) != len(store.MailedNotificationKinds())-1 {
		t.Fatalf("after saving:\n%s", r.body)
	}
	if off, _ := app.db.MailOptOuts(ctx, id); len(off) != 1 || !off[store.NotifyRefundSent] {
		t.Fatalf("opt-outs %v", off)
	}

	wf.Tick(ctx, testNow)
	before := len(srv.Messages())
	for _, k := range []string{store.NotifyRefundSent, store.NotifyPayoutSent} {
		if err := app.db.Notify(ctx, store.Notification{UserID: id, Kind: k, Message: "About " + k, CreatedAt: testNow}); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.db.QueueMail(ctx, store.OutboxMail{UserID: id, To: "ada@example.com", Kind: store.MailSignInMethod, Subject: "Two-factor sign-in turned off",
		Body: "It was you, we hope.", CreatedAt: testNow}); err != nil {
		t.Fatal(err)
	}
	wf.Tick(ctx, testNow)
	var subjects []string
	for _, m := range srv.Messages()[before:] {
		subjects = append(subjects, m.Header.Get("Subject"))
	}
	if strings.Join(subjects, "|") != "Payout sent|Two-factor sign-in turned off" {
		t.Fatalf("sent %q; want the payout and the security mail, not the refund", subjects)
	}
}

// The account page carries the same preferences form: one labelled
// checkbox per mailed kind, posting to /account/mail and coming back to the
// account page with the change applied. /account/mail (the List-Unsubscribe
// target) shows the same choices.
func TestMailPreferencesOnTheAccountPage(t *testing.T) {
	ctx := context.Background()
	app := newTestApp(t)
	c := app.client()
	c.signUp("ada@example.com", false)
	id := c.userID()

	r := c.get("/account")
	if r.status != http.StatusOK {
		t.Fatalf("/account: %d", r.status)
	}
	form := mailPrefsForm(t, r.body)
	mustContain(t, form, `<form method="post" action="/account/mail"`, `<input type="hidden" name="return" value="account">`,
		`data-testid="mail-preferences-save"`, "Security mail is always sent")
	boxes := mailPrefBoxes(t, form)
	kinds := store.MailedNotificationKinds()
	if len(boxes) != len(kinds) {
		t.Fatalf("%d checkboxes on the account page, want one per mailed kind (%d):\n%s", len(boxes), len(kinds), form)
	}
	for i, k := range kinds {
		b := boxes[i]
		if b.name != "mail_"+k || b.label != mailKindLabels[k] || !b.checked {
			t.Errorf("checkbox %d: %+v, want mail_%s labelled %q, ticked", i, b, k, mailKindLabels[k])
		}
	}

	save := url.Values{}
	for _, k := range kinds {
		if k != store.NotifyPayoutSent {
			save.Set("mail_"+k, "1")
		}
	}
	save.Set("return", "account")
	r = c.post("/account", "/account/mail", save)
	if r.status != http.StatusSeeOther || r.location != "/account#mail-preferences" {
		t.Fatalf("save from the account page: %d → %q, want 303 → /account#mail-preferences", r.status, r.location)
	}
	if off, err := app.db.MailOptOuts(ctx, id); err != nil || len(off) != 1 || !off[store.NotifyPayoutSent] {
		t.Fatalf("opt-outs %v (%v), want only %s", off, err, store.NotifyPayoutSent)
	}
	r = c.get("/account")
	mustContain(t, r.body, "E-mail preferences saved.")
	for _, page := range []string{"/account", "/account/mail"} {
		if page != "/account" {
			r = c.get(page)
		}
		after := mailPrefBoxes(t, mailPrefsForm(t, r.body))
		if len(after) != len(kinds) {
			t.Errorf("%s after saving: %d checkboxes, want %d", page, len(after), len(kinds))
		}
		for _, b := range after {
			if want := b.name != "mail_"+store.NotifyPayoutSent; b.checked != want {
				t.Errorf("%s after saving: %s ticked %v, want %v", page, b.name, b.checked, want)
			}
		}
	}
}

// mailPrefsForm is the preferences section of a page.
func mailPrefsForm(t *testing.T, body string) string {
	t.Helper()
	_, rest, ok := strings.Cut(body, `data-testid="mail-preferences"`)
	if !ok {
		t.Fatalf("no e-mail preferences on the page:\n%s", body)
	}
	form, _, _ := strings.Cut(rest, "</section>")
	return form
}

// mailPrefBox is one checkbox of the preferences form as rendered.
type mailPrefBox struct {
	name, label string
	checked     bool
}

var mailPrefBoxRe = regexp.MustCompile(`<label class="check" for="([^"]+)"><input type="checkbox" id="([^"]+)" name="([^"]+)" value="1"( checked)?>\s*<span>([^<]*)</span></label>`)

// mailPrefBoxes reads the checkboxes of a preferences form, each with the
// text of the label tied to it (the label's for names the box's id).
func mailPrefBoxes(t *testing.T, form string) []mailPrefBox {
	t.Helper()
	var out []mailPrefBox
	for _, m := range mailPrefBoxRe.FindAllStringSubmatch(form, -1) {
		if m[1] != m[2] {
			t.Errorf("label for=%q is not tied to the checkbox id=%q", m[1], m[2])
		}
		out = append(out, mailPrefBox{name: m[3], label: html.UnescapeString(m[5]), checked: m[4] != ""})
	}
	if n := strings.Count(form, `type="checkbox"`); n != len(out) {
		t.Fatalf("%d checkboxes in the form, %d of them inside a label:\n%s", n, len(out), form)
	}
	return out
}

// The outbox page is the admin's; it shows each message's state, and
// without an SMTP server says that nothing is sent.
func TestAdminMailPage(t *testing.T) {
	ctx := context.Background()
	app := newTestApp(t)
	buyer := app.client()
	buyer.signUp("ada@example.com", false)
	if err := app.db.Notify(ctx, store.Notification{UserID: buyer.userID(), Kind: store.NotifyRefundSent, Message: "A refund of $12.00.",
		URL: "/reservations/3", CreatedAt: testNow}); err != nil {
		t.Fatal(err)
	}
	ms, _ := app.db.ListMail(ctx, buyer.userID(), 10)
	var refund store.OutboxMail
	for _, m := range ms {
		if m.Kind == store.NotifyRefundSent {
			refund = m
		}
	}
	for _, path := range []string{"/admin/mail", "/admin/mail/" + itoa(refund.ID)} {
		if r := buyer.get(path); r.status != http.StatusForbidden {
			t.Fatalf("a buyer gets %s: %d", path, r.status)
		}
	}
	admin := app.adminClient("root@example.com")
	r := admin.get("/admin/mail")
	if r.status != http.StatusOK {
		t.Fatalf("/admin/mail: %d", r.status)
	}
	mustContain(t, r.body, `data-testid="mail-no-smtp"`, "ada@example.com", "Refund sent", `data-state="waiting"`, "not sent: no SMTP server configured")
	r = admin.get("/admin/mail/" + itoa(refund.ID))
	mustContain(t, r.body, "A refund of $12.00.", "http://127.0.0.1/reservations/3", "&lt;outbox-"+itoa(refund.ID)+"@127.0.0.1&gt;",
		"&lt;http://127.0.0.1/account/mail&gt;")

	// A message given up on shows its error and attempts, and can be queued again.
	if err := app.db.GiveUpMail(ctx, refund.ID, "550 mailbox unavailable", true, testNow); err != nil {
		t.Fatal(err)
	}
	r = admin.get("/admin/mail")
	mustContain(t, r.body, `data-state="failed"`, "550 mailbox unavailable", " 1 failed.")
	r = admin.post("/admin/mail/"+itoa(refund.ID), "/admin/mail/"+itoa(refund.ID)+"/retry", url.Values{})
	if r.status != http.StatusSeeOther {
		t.Fatalf("retry: %d", r.status)
	}
	if m, _ := app.db.FindMail(ctx, refund.ID); m.Failed() || m.Attempts != 0 {
		t.Fatalf("after retry: %+v", m)
	}
}

// The demo mailbox exists in demo mode only and shows a person their own
// mail; an admin sees everyone's.
func TestDemoMailbox(t *testing.T) {
	ctx := context.Background()
	plain := newTestApp(t)
	c := plain.client()
	c.signUp("ada@example.com", false)
	if r := c.get("/mailbox"); r.status != http.StatusNotFound {
		t.Fatalf("mailbox outside demo mode: %d", r.status)
	}

	app := newTestAppWith(t, func(cfg *Config) { cfg.Demo = true })
	ada, bob := app.client(), app.client()
	ada.signUp("ada@example.com", false)
	bob.signUp("bob@example.com", false)
	for _, u := range []struct {
		id  int64
		msg string
	}{{ada.userID(), "For Ada only."}, {bob.userID(), "For Bob only."}} {
		if err := app.db.Notify(ctx, store.Notification{UserID: u.id, Kind: store.NotifyPayoutSent, Message: u.msg, CreatedAt: testNow}); err != nil {
			t.Fatal(err)
		}
	}
	r := ada.get("/mailbox")
	mustContain(t, r.body, "Demo mailbox", `data-testid="demo-mailbox-badge"`, "ada@example.com", "not sent: no SMTP server configured")
	mustNotContain(t, r.body, "bob@example.com")
	bobs, _ := app.db.ListMail(ctx, bob.userID(), 10)
	if r := ada.get("/mailbox/" + itoa(bobs[0].ID)); r.status != http.StatusNotFound {
		t.Fatalf("Ada opens Bob's mail: %d", r.status)
	}
	r = bob.get("/mailbox/" + itoa(bobs[0].ID))
	if r.status != http.StatusOK {
		t.Fatalf("Bob opens his mail: %d", r.status)
	}
	mustContain(t, r.body, "For Bob only.", "bob@example.com")
	admin := app.adminClient("root@example.com")
	mustContain(t, admin.get("/mailbox").body, "ada@example.com", "bob@example.com", "to everyone")
	if r := app.client().get("/mailbox"); r.status != http.StatusSeeOther {
		t.Fatalf("a visitor gets the mailbox: %d", r.status)
	}
}
