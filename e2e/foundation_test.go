package e2e

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/playwright-community/playwright-go"

	"github.com/gpumarket/gpumarket/store"
)

// The foundation's browser tests (issue 2): a provider lists capacity, an admin approves it, a
// visitor finds it through the catalogue's filter; the log-in form works by keyboard alone; the
// demo catalogue filters; the catalogue and the offer form fit a phone's width.

// newOffer is what the provider types into the offer form. The values are distinct from the
// demo data so that a filter finds this offer and nothing else.
type newOffer struct {
	Title            string
	Accelerator      string // the option's label in the form
	AcceleratorValue string // the option's value, as the catalogue's filter sends it
	MemoryGB         string
	DevicesPerNode   string
	DriverVersion    string
	CUDAVersion      string
	Region           string // the option's label
	RegionValue      string
	Carbon           string
	PowerNote        string
	Price            string
	InterruptPrice   string
	PreemptNotice    string
	BF16Value        string // guaranteed
	AllReduceValue   string // estimated, with AllReduceMethod
	AllReduceMethod  string
}

var quebecH100 = newOffer{
	Title:            "Northern Lights H100 rack, Québec hydro",
	Accelerator:      "NVIDIA H100 80GB SXM",
	AcceleratorValue: "nvidia-h100-80gb-sxm",
	MemoryGB:         "96", // wrong: the catalogue says 80
	DevicesPerNode:   "4",
	DriverVersion:    "550.54",
	CUDAVersion:      "12.4",
	Region:           "Canada East (Québec) — CA",
	RegionValue:      "ca-east-qc",
	Carbon:           "31",
	PowerNote:        "Hydro-Québec, 100% hydro",
	Price:            "3.17",
	InterruptPrice:   "1.59",
	PreemptNotice:    "15",
	BF16Value:        "950",
	AllReduceValue:   "370",
	AllReduceMethod:  "nccl-tests all_reduce_perf, 8 GB messages",
}

func TestProviderListsOfferAdminApprovesVisitorFinds(t *testing.T) {
	srv := startServer(t, withDemo())
	o := quebecH100

	// A new provider signs up and lands on their (empty) list of offers.
	provider := newPage(t)
	signUp(t, provider, srv, "nora@northern-lights.test", "Nora Lindqvist", "Northern Lights Compute", false, true)
	expectURL(t, provider, srv.URL+"/provider/offers")
	expectVisible(t, provider.GetByTestId("offers-empty"), "the empty list of a new provider")
	click(t, provider.GetByTestId("new-offer"), "List capacity")
	expectURL(t, provider, srv.URL+"/provider/offers/new")
	expectVisible(t, provider.GetByTestId("offer-form"), "the offer form")

	// The provider states 96 GB for an 80 GB part: the server rejects just that field and keeps
	// everything typed.
	fillOffer(t, provider, o)
	resp, err := provider.ExpectNavigation(func() error { return provider.GetByTestId("offer-submit").Click() })
	if err != nil {
		t.Fatalf("submit the offer with a wrong memory: %v", err)
	}
	if resp == nil || resp.Status() != http.StatusUnprocessableEntity {
		t.Errorf("submit with a wrong memory: status %v, want %d", statusOf(resp), http.StatusUnprocessableEntity)
	}
	memErr := provider.GetByTestId("error-memory_gb")
	expectText(t, memErr, "The H100 80GB SXM has 80 GB per device", "memory error")
	expectText(t, memErr, "96 GB", "memory error")
	// The message is tied to the field, not just near it.
	if err := expect.Locator(field(provider, "Memory per device (GB)")).ToHaveAttribute("aria-describedby", "e-memory_gb"); err != nil {
		t.Errorf("memory input is not described by its error: %v", err)
	}
	if err := expect.Locator(field(provider, "Memory per device (GB)")).ToHaveAttribute("aria-invalid", "true"); err != nil {
		t.Errorf("memory input is not marked invalid: %v", err)
	}
	if err := expect.Locator(provider.Locator("[data-testid^='error-']:not([data-testid='error-summary'])")).ToHaveCount(1); err != nil {
		t.Errorf("want exactly one field error (memory), got others: %v", err)
	}
	expectText(t, provider.GetByTestId("error-summary"), "Please correct 1 field", "error summary")
	expectOfferKept(t, provider, o)
	shot(t, provider, "offer-form-errors")

	// Corrected, it is submitted and waits for review.
	fill(t, field(provider, "Memory per device (GB)"), "80")
	click(t, provider.GetByTestId("offer-submit"), "submit the corrected offer")
	expectURL(t, provider, srv.URL+"/provider/offers")
	expectText(t, provider.GetByTestId("flash"), "pending review", "flash after submitting")
	row := provider.GetByTestId("provider-offer-row").Filter(playwright.LocatorFilterOptions{HasText: o.Title})
	if err := expect.Locator(row).ToHaveCount(1); err != nil {
		t.Fatalf("the provider's list does not show %q once: %v", o.Title, err)
	}
	expectText(t, row.GetByTestId("review-state"), "pending review", "review state")
	expectText(t, row, "$3.17", "price in the provider's list")
	offerID, err := row.GetAttribute("data-offer-id")
	if err != nil || offerID == "" {
		t.Fatalf("provider row has no data-offer-id: %q, %v", offerID, err)
	}
	shot(t, provider, "provider-offers")

	// Pending, the offer is in no catalogue search and its page is not public.
	visitor := newPage(t)
	gotoOK(t, visitor, srv.URL+"/?model="+o.AcceleratorValue)
	if err := expect.Locator(visitor.GetByTestId("offer-card")).ToHaveCount(2); err != nil {
		t.Errorf("before approval, the H100 SXM search should show the 2 demo offers only: %v", err)
	}
	if err := expect.Locator(visitor.GetByTestId("offer-card").Filter(playwright.LocatorFilterOptions{HasText: o.Title})).ToHaveCount(0); err != nil {
		t.Errorf("a pending offer is in the catalogue: %v", err)
	}
	gotoOK(t, visitor, srv.URL+"/?model="+o.AcceleratorValue+"&country=CA")
	expectVisible(t, visitor.GetByTestId("catalogue-empty"), "empty result for H100 SXM in CA before approval")
	if r, err := visitor.Goto(srv.URL + "/offers/" + offerID); err != nil || r.Status() != http.StatusNotFound {
		t.Errorf("a visitor opening the pending offer: status %v (%v), want 404", statusOf(r), err)
	}

	// An admin approves it from the review list.
	srv.createAdmin(t, "reviewer@gpumarket.test", "reviewer-password-1")
	admin := newPage(t)
	logIn(t, admin, srv, "reviewer@gpumarket.test", "reviewer-password-1")
	openMenu(t, admin, "admin")
	click(t, admin.GetByRole("link", playwright.PageGetByRoleOptions{Name: "Review queue"}), "Review queue")
	expectURL(t, admin, srv.URL+"/admin/offers")
	review := admin.GetByTestId("review-row").Filter(playwright.LocatorFilterOptions{HasText: o.Title})
	if err := expect.Locator(review).ToHaveCount(1); err != nil {
		t.Fatalf("the review list does not show %q once: %v", o.Title, err)
	}
	expectText(t, review, "Nora Lindqvist", "review row provider")
	shot(t, admin, "admin-queue")
	click(t, review.GetByTestId("approve"), "Approve")
	expectText(t, admin.GetByTestId("flash"), "approved", "flash after approving")
	expectVisible(t, admin.GetByTestId("review-empty"), "the emptied review list")

	// The provider sees it approved.
	gotoOK(t, provider, srv.URL+"/provider/offers")
	expectText(t, row.GetByTestId("review-state"), "approved", "review state after approval")

	// A visitor finds it through the filter form, and only it.
	visitor = newPage(t)
	gotoOK(t, visitor, srv.URL+"/")
	filters := visitor.GetByTestId("filters")
	selectOption(t, filters.GetByLabel("Accelerator", playwright.LocatorGetByLabelOptions{Exact: playwright.Bool(true)}), "H100 80GB SXM")
	selectOption(t, filters.GetByLabel("Country", playwright.LocatorGetByLabelOptions{Exact: playwright.Bool(true)}), "Canada (CA)")
	fill(t, filters.GetByLabel("Max price per device-hour ($)"), "3.50")
	click(t, visitor.GetByTestId("filter-submit"), "Apply")
	if err := expect.Page(visitor).ToHaveURL(regexp.MustCompile(`[?&]model=nvidia-h100-80gb-sxm(&|$)`)); err != nil {
		t.Errorf("the filter is not in the URL: %v", err)
	}
	if err := expect.Page(visitor).ToHaveURL(regexp.MustCompile(`[?&]country=CA(&|$)`)); err != nil {
		t.Errorf("the country is not in the URL: %v", err)
	}
	cards := visitor.GetByTestId("offer-card")
	if err := expect.Locator(cards).ToHaveCount(1); err != nil {
		t.Fatalf("H100 SXM in CA under $3.50: want exactly our offer: %v", err)
	}
	expectText(t, cards, o.Title, "the card")
	expectText(t, cards, "$3.17", "the card's price")
	expectText(t, cards, "Canada East (Québec) (CA)", "the card's region")
	expectText(t, cards, "4 × H100 80GB SXM", "the card's devices")
	expectText(t, visitor.GetByTestId("results-count"), "1 offer", "results count")
	// The selects keep the filter after the round trip.
	if err := expect.Locator(filters.GetByLabel("Country", playwright.LocatorGetByLabelOptions{Exact: playwright.Bool(true)})).ToHaveValue("CA"); err != nil {
		t.Errorf("the country filter is not kept: %v", err)
	}
	shot(t, visitor, "catalogue")

	// A price ceiling below its price hides it again.
	fill(t, filters.GetByLabel("Max price per device-hour ($)"), "3.16")
	click(t, visitor.GetByTestId("filter-submit"), "Apply")
	expectVisible(t, visitor.GetByTestId("catalogue-empty"), "empty result under $3.16")
	visitor.GoBack()
	expectVisible(t, cards.First(), "our card after going back")

	click(t, cards.GetByRole("link", playwright.LocatorGetByRoleOptions{Name: o.Title}), "the offer's title")
	expectURL(t, visitor, srv.URL+"/offers/"+offerID)
	if err := expect.Locator(visitor.GetByTestId("offer-title")).ToHaveText(o.Title); err != nil {
		t.Errorf("offer title: %v", err)
	}
	contract := visitor.GetByTestId("offer-contract")
	expectText(t, contract, "NVIDIA H100 80GB SXM", "contract accelerator")
	expectText(t, contract, "80 GB", "contract memory")
	expectText(t, contract, "4 per node × 1 node(s) = 4", "contract devices")
	expectText(t, contract, "Canada East (Québec), Montréal", "contract region")
	expectText(t, contract, "$3.17 per device-hour", "contract price")
	expectText(t, contract, "floor $1.59 per device-hour, 15 minutes' notice", "contract interruptible price")
	expectText(t, contract, "Hydro-Québec, 100% hydro", "contract power note")
	expectText(t, contract, "31 gCO2/kWh", "contract carbon")
	if n, _ := contract.Locator(".badge-guaranteed").Count(); n < 5 {
		t.Errorf("the contract shows %d guaranteed badges, want the hardware, place, window and prices marked", n)
	}
	expectVisible(t, contract.Locator(".badge-estimated").First(), "an estimated badge in the contract (carbon)")
	figures := visitor.GetByTestId("figures")
	bf16 := figures.Locator("tr").Filter(playwright.LocatorFilterOptions{HasText: "BF16 throughput per device"})
	expectText(t, bf16, "950 TFLOPS", "BF16 figure")
	expectText(t, bf16.Locator(".badge"), "guaranteed", "BF16 figure basis")
	ar := figures.Locator("tr").Filter(playwright.LocatorFilterOptions{HasText: "All-reduce bus bandwidth"})
	expectText(t, ar, "370 GB/s", "all-reduce figure")
	expectText(t, ar.Locator(".badge"), "estimated", "all-reduce figure basis")
	expectText(t, ar, o.AllReduceMethod, "all-reduce method")
	if err := expect.Locator(visitor.GetByTestId("offer-status")).ToHaveCount(0); err != nil {
		t.Errorf("a listed offer shows a not-listed status: %v", err)
	}
	shot(t, visitor, "offer-page")
}

// TestLoginByKeyboard reaches the log-in form's fields and button with Tab alone, by their labels,
// and logs in with Enter.
func TestLoginByKeyboard(t *testing.T) {
	srv := startServer(t)
	srv.createAdmin(t, "keys@gpumarket.test", "keyboard-only-pass")
	page := newPage(t)
	gotoOK(t, page, srv.URL+"/login")

	email := field(page, "Email")
	password := field(page, "Password")
	submit := page.GetByRole("button", playwright.PageGetByRoleOptions{Name: "Log in", Exact: playwright.Bool(true)})
	if err := expect.Locator(email).ToBeFocused(); err != nil {
		t.Errorf("the email field is not focused on load (autofocus): %v", err)
	}

	// Backwards from the email field, Shift+Tab walks through the page header to the skip link,
	// which comes first; Tab alone then walks forward the same way to the email field again.
	skip := page.GetByRole("link", playwright.PageGetByRoleOptions{Name: "Skip to content"})
	var back []string
	for len(back) < 15 {
		press(t, page, "Shift+Tab")
		back = append(back, focused(t, page))
		if inHeader, _ := page.Evaluate(`() => !!document.activeElement.closest("header, .skip")`); inHeader != true {
			t.Fatalf("Shift+Tab from the email field left the header before the skip link; focus went %q", back)
		}
		if ok, _ := skip.Evaluate(`e => e === document.activeElement`, nil); ok == true {
			break
		}
	}
	if err := expect.Locator(skip).ToBeFocused(); err != nil {
		t.Fatalf("Shift+Tab from the email field never reached the skip link; focus went %q", back)
	}
	for i := len(back) - 2; i >= 0; i-- {
		press(t, page, "Tab")
		if got := focused(t, page); got != back[i] {
			t.Errorf("Tab order is not Shift+Tab reversed: at step %d focus is %q, want %q", len(back)-1-i, got, back[i])
		}
	}
	press(t, page, "Tab")
	if err := expect.Locator(email).ToBeFocused(); err != nil {
		t.Fatalf("Tab through the header does not reach the email field (header order %q): %v", back, err)
	}

	if err := email.PressSequentially("keys@gpumarket.test"); err != nil {
		t.Fatalf("type email: %v", err)
	}
	press(t, page, "Tab")
	if err := expect.Locator(password).ToBeFocused(); err != nil {
		t.Fatalf("Tab from email does not reach the password: %v", err)
	}
	if err := password.PressSequentially("keyboard-only-pass"); err != nil {
		t.Fatalf("type password: %v", err)
	}
	press(t, page, "Tab")
	if err := expect.Locator(submit).ToBeFocused(); err != nil {
		t.Errorf("Tab from password does not reach the Log in button: %v", err)
	}
	press(t, page, "Shift+Tab")
	if err := expect.Locator(password).ToBeFocused(); err != nil {
		t.Fatalf("Shift+Tab does not go back to the password: %v", err)
	}
	press(t, page, "Enter")

	// An admin has two-factor sign-in: the code page's field has the focus; type the code, Enter.
	expectURL(t, page, srv.URL+"/login/code")
	code := field(page, "Code from your app")
	if err := expect.Locator(code).ToBeFocused(); err != nil {
		t.Errorf("the code field is not focused on load (autofocus): %v", err)
	}
	if err := code.PressSequentially(srv.nextTOTPCode(t, "keys@gpumarket.test")); err != nil {
		t.Fatalf("type the code: %v", err)
	}
	press(t, page, "Enter")

	expectVisible(t, page.GetByTestId("nav-account"), "the Account menu after logging in")
	if err := expect.Page(page).ToHaveURL(srv.URL + "/"); err != nil {
		t.Errorf("after log-in: %v", err)
	}
	openMenu(t, page, "admin")
	expectVisible(t, page.GetByRole("link", playwright.PageGetByRoleOptions{Name: "Review queue"}), "the admin's Review queue link")
}

// TestDemoCatalogue browses the demo data: many offers, a family filter narrows them, and a
// filter that matches nothing says so and offers a way back.
func TestDemoCatalogue(t *testing.T) {
	srv := startServer(t, withDemo())
	page := newPage(t)
	gotoOK(t, page, srv.URL+"/")
	expectVisible(t, page.GetByTestId("demo-banner"), "the demo banner")

	cards := page.GetByTestId("offer-card")
	expectVisible(t, cards.First(), "the first offer card")
	all, err := cards.Count()
	if err != nil {
		t.Fatalf("count cards: %v", err)
	}
	if all < 10 {
		t.Fatalf("the demo catalogue shows %d offers, want at least 10", all)
	}

	filters := page.GetByTestId("filters")
	selectOption(t, filters.GetByLabel("Family", playwright.LocatorGetByLabelOptions{Exact: playwright.Bool(true)}), "H100")
	click(t, page.GetByTestId("filter-submit"), "Apply")
	if err := expect.Page(page).ToHaveURL(regexp.MustCompile(`[?&]family=H100(&|$)`)); err != nil {
		t.Errorf("the family is not in the URL: %v", err)
	}
	// The demo lists three H100 offers (two SXM, one PCIe) and nothing else of that family.
	if err := expect.Locator(cards).ToHaveCount(3); err != nil {
		t.Fatalf("family H100: %v", err)
	}
	texts, err := cards.AllInnerTexts()
	if err != nil {
		t.Fatalf("read cards: %v", err)
	}
	for _, s := range texts {
		if !strings.Contains(s, "× H100 80GB") {
			t.Errorf("a card under family H100 is another accelerator:\n%s", s)
		}
	}
	expectText(t, page.GetByTestId("results-count"), "3 offers", "results count")
	shot(t, page, "family-h100")

	// Sorting by price, highest first, reverses the order.
	selectOption(t, filters.GetByLabel("Sort by"), "Price, highest first")
	click(t, page.GetByTestId("filter-submit"), "Apply")
	if err := expect.Page(page).ToHaveURL(regexp.MustCompile(`[?&]sort=`)); err != nil {
		t.Errorf("the sort is not in the URL: %v", err)
	}
	if err := expect.Locator(cards.First()).ToContainText("$2.59"); err != nil {
		t.Errorf("highest price first: the first H100 card is not the $2.59 Tokyo PCIe: %v", err)
	}

	// Nothing in the family is this cheap.
	fill(t, filters.GetByLabel("Max price per device-hour ($)"), "0.50")
	click(t, page.GetByTestId("filter-submit"), "Apply")
	empty := page.GetByTestId("catalogue-empty")
	expectText(t, empty, "No offers match this filter", "empty state")
	if err := expect.Locator(cards).ToHaveCount(0); err != nil {
		t.Errorf("the empty state shows cards: %v", err)
	}
	shot(t, page, "empty")

	click(t, empty.GetByRole("link", playwright.LocatorGetByRoleOptions{Name: "Clear the filter"}), "Clear the filter")
	expectURL(t, page, srv.URL+"/")
	if err := expect.Locator(cards).ToHaveCount(all); err != nil {
		t.Errorf("after clearing the filter: %v", err)
	}
	if err := expect.Locator(filters.GetByLabel("Family", playwright.LocatorGetByLabelOptions{Exact: playwright.Bool(true)})).ToHaveValue(""); err != nil {
		t.Errorf("the family filter is still set after clearing: %v", err)
	}
}

// TestNarrowViewport uses the catalogue and the offer form on a phone: nothing is wider than the
// screen, and the form can be filled in and submitted.
func TestNarrowViewport(t *testing.T) {
	srv := startServer(t, withDemo())
	page := newPage(t, narrow)

	gotoOK(t, page, srv.URL+"/")
	expectVisible(t, page.GetByTestId("offer-card").First(), "an offer card")
	noHorizontalOverflow(t, page, "catalogue")
	filters := page.GetByTestId("filters")
	selectOption(t, filters.GetByLabel("Country", playwright.LocatorGetByLabelOptions{Exact: playwright.Bool(true)}), "Sweden (SE)")
	click(t, page.GetByTestId("filter-submit"), "Apply")
	if err := expect.Locator(page.GetByTestId("offer-card")).ToHaveCount(2); err != nil {
		t.Errorf("country SE on a phone: %v", err)
	}
	noHorizontalOverflow(t, page, "filtered catalogue")
	click(t, page.GetByTestId("offer-card").First().GetByRole("link"), "the first card's title")
	expectVisible(t, page.GetByTestId("offer-contract"), "the offer's contract")
	noHorizontalOverflow(t, page, "offer page")

	signUp(t, page, srv, "phone@provider.test", "Pat Phone", "", false, true)
	click(t, page.GetByTestId("new-offer"), "List capacity")
	expectVisible(t, page.GetByTestId("offer-form"), "the offer form")
	noHorizontalOverflow(t, page, "offer form")

	o := quebecH100
	o.Title = "Phone-listed H100 node"
	o.MemoryGB = "80"
	fillOffer(t, page, o)
	// The submit button is reachable on a phone.
	if err := page.GetByTestId("offer-submit").ScrollIntoViewIfNeeded(); err != nil {
		t.Fatalf("scroll to submit: %v", err)
	}
	noHorizontalOverflow(t, page, "filled offer form")
	click(t, page.GetByTestId("offer-submit"), "submit")
	expectURL(t, page, srv.URL+"/provider/offers")
	row := page.GetByTestId("provider-offer-row").Filter(playwright.LocatorFilterOptions{HasText: o.Title})
	expectText(t, row.GetByTestId("review-state"), "pending review", "review state")
	noHorizontalOverflow(t, page, "provider offers")
}

// fillOffer fills every field of the offer form the test cares about.
func fillOffer(t *testing.T, page playwright.Page, o newOffer) {
	t.Helper()
	fill(t, field(page, "Title"), o.Title)
	selectOption(t, field(page, "Accelerator"), o.Accelerator)
	fill(t, field(page, "Memory per device (GB)"), o.MemoryGB)
	fill(t, field(page, "Devices per node"), o.DevicesPerNode)
	selectOption(t, field(page, "Interconnect inside a node"), "NVLink / Infinity Fabric") // the form does not choose it
	fill(t, field(page, "Driver version"), o.DriverVersion)
	fill(t, field(page, "CUDA or ROCm version"), o.CUDAVersion)
	selectOption(t, field(page, "Region"), o.Region)
	fill(t, field(page, "Grid carbon intensity (gCO2/kWh)"), o.Carbon)
	fill(t, field(page, "Power source note (optional)"), o.PowerNote)
	fill(t, field(page, "On-demand price per device-hour"), o.Price)
	if err := page.GetByLabel("Sell interruptible (preemptible) capacity on the spot market").Check(); err != nil {
		t.Fatalf("tick interruptible: %v", err)
	}
	fill(t, field(page, "Spot floor price per device-hour"), o.InterruptPrice)
	fill(t, field(page, "Notice before preemption (minutes)"), o.PreemptNotice)
	fill(t, field(page, "BF16 throughput per device value"), o.BF16Value)
	selectOption(t, field(page, "BF16 throughput per device basis"), "guaranteed")
	fill(t, field(page, "All-reduce bus bandwidth value"), o.AllReduceValue)
	selectOption(t, field(page, "All-reduce bus bandwidth basis"), "estimated")
	fill(t, field(page, "All-reduce bus bandwidth method"), o.AllReduceMethod)
}

// expectOfferKept checks that a redisplayed offer form holds everything fillOffer typed.
func expectOfferKept(t *testing.T, page playwright.Page, o newOffer) {
	t.Helper()
	want := []struct{ label, value string }{
		{"Title", o.Title},
		{"Accelerator", o.AcceleratorValue},
		{"Memory per device (GB)", o.MemoryGB},
		{"Devices per node", o.DevicesPerNode},
		{"Driver version", o.DriverVersion},
		{"CUDA or ROCm version", o.CUDAVersion},
		{"Region", o.RegionValue},
		{"Grid carbon intensity (gCO2/kWh)", o.Carbon},
		{"Power source note (optional)", o.PowerNote},
		{"On-demand price per device-hour", o.Price},
		{"Spot floor price per device-hour", o.InterruptPrice},
		{"Notice before preemption (minutes)", o.PreemptNotice},
		{"BF16 throughput per device value", o.BF16Value},
		{"BF16 throughput per device basis", "guaranteed"},
		{"All-reduce bus bandwidth value", o.AllReduceValue},
		{"All-reduce bus bandwidth basis", "estimated"},
		{"All-reduce bus bandwidth method", o.AllReduceMethod},
	}
	for _, w := range want {
		if err := expect.Locator(field(page, w.label)).ToHaveValue(w.value); err != nil {
			t.Errorf("after the failed submit, %q lost its value: %v", w.label, err)
		}
	}
	if err := expect.Locator(page.GetByLabel("Sell interruptible (preemptible) capacity on the spot market")).ToBeChecked(); err != nil {
		t.Errorf("after the failed submit, interruptible is unticked: %v", err)
	}
}

// signUp creates an account through the sign-up form, confirms its address from the link mailed
// to it (read from the server's outbox) and logs in, landing where a new account used to: the
// provider's offers or the catalogue.
func signUp(t *testing.T, page playwright.Page, srv *server, email, name, org string, buyer, provider bool) {
	t.Helper()
	gotoOK(t, page, srv.URL+"/signup")
	fill(t, field(page, "Email"), email)
	fill(t, field(page, "Password"), "a long enough password")
	fill(t, field(page, "Display name"), name)
	fill(t, field(page, "Organisation (optional)"), org)
	setChecked(t, page.GetByLabel("Rent compute (buyer)"), buyer)
	setChecked(t, page.GetByLabel("List my GPUs (provider)"), provider)
	click(t, page.GetByTestId("signup-submit"), "Create account")
	expectVisible(t, page.GetByTestId("signup-sent"), "the check-your-e-mail page after signing up")
	gotoOK(t, page, srv.URL+srv.mailLink(t, email, store.MailVerifyAddress))
	expectText(t, page.GetByTestId("flash"), "Your e-mail address is confirmed", "flash after following the link")
	next := "/"
	if provider {
		next = "/provider/offers"
	}
	gotoOK(t, page, srv.URL+"/login?next="+url.QueryEscape(next))
	fill(t, field(page, "Email"), email)
	fill(t, field(page, "Password"), "a long enough password")
	click(t, page.GetByTestId("login-submit"), "Log in")
	expectURL(t, page, srv.URL+next)
}

// logIn logs in through the log-in form, with a code when the account has two-factor sign-in.
func logIn(t *testing.T, page playwright.Page, srv *server, email, password string) {
	t.Helper()
	gotoOK(t, page, srv.URL+"/login")
	fill(t, field(page, "Email"), email)
	fill(t, field(page, "Password"), password)
	click(t, page.GetByTestId("login-submit"), "Log in")
	enterTOTPCode(t, page, srv, email)
	expectVisible(t, page.GetByTestId("nav-account"), "the Account menu after logging in")
}

// openMenu opens one menu of the navigation ("rent", "exchange", "provide", "admin", "account").
func openMenu(t *testing.T, page playwright.Page, id string) {
	t.Helper()
	menu := page.GetByTestId("nav-" + id)
	if open, err := menu.GetAttribute("open"); err == nil && open != "" {
		return
	}
	click(t, menu.Locator("summary"), "the "+id+" menu")
}

// logOut logs out through the Account menu.
func logOut(t *testing.T, page playwright.Page) {
	t.Helper()
	openMenu(t, page, "account")
	click(t, page.GetByTestId("logout"), "Log out")
}

// noHorizontalOverflow fails the test if the page is wider than the window, and names the
// widest elements that stick out.
func noHorizontalOverflow(t *testing.T, page playwright.Page, what string) {
	t.Helper()
	res, err := page.Evaluate(`() => {
		const w = window.innerWidth, sw = document.documentElement.scrollWidth;
		const out = [];
		if (sw > w) {
			for (const e of document.querySelectorAll('body *')) {
				const r = e.getBoundingClientRect();
				if (r.right > w + 1 && out.length < 5) out.push(e.tagName.toLowerCase() + (e.className ? '.' + e.className : '') + ' right=' + Math.round(r.right));
			}
		}
		return {w, sw, out};
	}`)
	if err != nil {
		t.Fatalf("%s: measure width: %v", what, err)
	}
	m := res.(map[string]interface{})
	if toInt(m["sw"]) > toInt(m["w"]) {
		t.Errorf("%s: page is %d px wide in a %d px window (horizontal scrolling); sticking out: %v", what, toInt(m["sw"]), toInt(m["w"]), m["out"])
	}
}

// focused describes the focused element, e.g. `a "Sign up"` or `input#f-email`.
func focused(t *testing.T, page playwright.Page) string {
	t.Helper()
	d, err := page.Evaluate(`() => { const e = document.activeElement; return e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + (e.tagName === "INPUT" ? "" : " " + JSON.stringify((e.textContent || "").trim())) }`)
	if err != nil {
		t.Fatalf("read focus: %v", err)
	}
	s, _ := d.(string)
	return s
}

func toInt(v interface{}) int {
	switch n := v.(type) {
	case int:
		return n
	case float64:
		return int(n)
	}
	return -1
}

// field is the form control whose label is exactly text.
func field(page playwright.Page, text string) playwright.Locator {
	return page.GetByLabel(text, playwright.PageGetByLabelOptions{Exact: playwright.Bool(true)})
}

func gotoOK(t *testing.T, page playwright.Page, url string) {
	t.Helper()
	resp, err := page.Goto(url)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	if resp.Status() >= 400 {
		t.Fatalf("open %s: status %d", url, resp.Status())
	}
}

func fill(t *testing.T, l playwright.Locator, value string) {
	t.Helper()
	if err := l.Fill(value); err != nil {
		t.Fatalf("fill %q: %v", value, err)
	}
}

func selectOption(t *testing.T, l playwright.Locator, label string) {
	t.Helper()
	if _, err := l.SelectOption(playwright.SelectOptionValues{Labels: &[]string{label}}); err != nil {
		t.Fatalf("choose %q: %v", label, err)
	}
}

func setChecked(t *testing.T, l playwright.Locator, on bool) {
	t.Helper()
	if err := l.SetChecked(on); err != nil {
		t.Fatalf("set checkbox to %v: %v", on, err)
	}
}

func click(t *testing.T, l playwright.Locator, what string) {
	t.Helper()
	if err := l.Click(); err != nil {
		t.Fatalf("click %s: %v", what, err)
	}
}

func press(t *testing.T, page playwright.Page, key string) {
	t.Helper()
	if err := page.Keyboard().Press(key); err != nil {
		t.Fatalf("press %s: %v", key, err)
	}
}

func expectURL(t *testing.T, page playwright.Page, url string) {
	t.Helper()
	if err := expect.Page(page).ToHaveURL(url); err != nil {
		t.Fatalf("want to be at %s: %v", url, err)
	}
}

func expectVisible(t *testing.T, l playwright.Locator, what string) {
	t.Helper()
	if err := expect.Locator(l).ToBeVisible(); err != nil {
		t.Fatalf("%s is not visible: %v", what, err)
	}
}

func expectText(t *testing.T, l playwright.Locator, text, what string) {
	t.Helper()
	if err := expect.Locator(l).ToContainText(text); err != nil {
		t.Errorf("%s does not say %q: %v", what, text, err)
	}
}

func statusOf(r playwright.Response) interface{} {
	if r == nil {
		return "no response"
	}
	return r.Status()
}
