# gpumarket: `make run` serves the marketplace with demo data; `make test` installs what the tests
# need and runs every test. Needs only Go for `make run` (templ runs as `go tool templ`).

GO    ?= go
BIN   := bin/gpumarket
AGENT := bin/gpumarket-agent
TEMPL := $(GO) tool templ

# The same build as the Dockerfile's.
BUILD := CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w"

# Every package but the browser tests, which run on their own.
UNIT_PKGS = $$($(GO) list ./... | grep -v '/e2e$$')

# What the tests use, as installed by scripts/install-test-deps.sh.
export PLAYWRIGHT_DRIVER_PATH ?= $(CURDIR)/e2e/driver
export E2E_CHROMIUM           ?= /usr/bin/chromium
export STRIPE_MOCK_BIN        ?= $(CURDIR)/tools/bin/stripe-mock

# Benchmarks: `make bench BENCH=Match` runs only the matching ones.
BENCH ?= .

.DEFAULT_GOAL := build
.NOTPARALLEL:
.PHONY: run build first-build-notice generate check-generated test-deps test vet test-unit test-postgres test-e2e bench loadtest loadtest-replicas clean

## run: build, then serve on :8080 with demo data in ./data (ARGS="-addr :9090" to add flags)
run: build
	mkdir -p data
	./$(BIN) serve -demo $(ARGS)

## build: generate the templ views and build ./bin/gpumarket and the provider agent ./bin/gpumarket-agent
build: first-build-notice generate
	$(BUILD) -o $(BIN) ./cmd/gpumarket
	$(BUILD) -o $(AGENT) ./cmd/gpumarket-agent
	@echo "Built $(BIN) and $(AGENT)."

# The first build compiles templ itself, then SQLite (a large pure-Go package) and every other
# dependency, with nothing to show for minutes; say so. Go caches the results: later builds
# take seconds.
first-build-notice:
	@if [ ! -x $(BIN) ]; then \
		echo "First build: compiling templ, SQLite and the other dependencies. This takes a few minutes"; \
		echo "once, with little output; Go caches the result, so later builds take seconds."; \
	fi

## generate: turn views/*.templ into *_templ.go (committed); quiet unless something is wrong
generate:
	$(TEMPL) generate -log-level warn

## check-generated: fail if the committed *_templ.go differ from what templ generates
check-generated: generate
	@changed="$$(git diff --name-only -- '*_templ.go'; git ls-files --others --exclude-standard -- '*_templ.go')"; \
	if [ -n "$$changed" ]; then \
		echo "generated templ files are not up to date in git; run 'make generate' and commit:"; \
		echo "$$changed"; \
		exit 1; \
	fi

## test-deps: install Chromium, the Playwright driver and stripe-mock (pinned, idempotent)
test-deps:
	bash scripts/install-test-deps.sh

## test: everything CI runs
test: test-deps check-generated vet test-unit test-postgres test-e2e

## vet: go vet, and gofmt over every Go file in git
vet:
	$(GO) vet ./...
	@unformatted="$$("$$($(GO) env GOROOT)/bin/gofmt" -l $$(git ls-files '*.go'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt would change (run gofmt -w):"; echo "$$unformatted"; exit 1; fi

# The race detector makes tests many times slower. It runs on every package whose code shares
# state between goroutines in its tests (store, workflow, billing, cmd, metrics, …); market's and
# web's suites are long and mostly sequential, so they run without it, and again with it only for
# their tests that run goroutines side by side (RACE_TESTS).
RACE_PKGS  = $$($(GO) list ./... | grep -v -e '/e2e$$' -e '/market$$' -e '/web$$')
RACE_TESTS = TestIndexConcurrent|TestBackgroundLoop|TestAPIRateLimit|TestMetrics|TestReserveHoldsAndNeverDoubleBooks

test-unit:
	$(GO) test -race -timeout 30m -skip '^($(REPLICA_TESTS))$$' $(RACE_PKGS)
	$(GO) test -timeout 30m ./market/ ./web/
	$(GO) test -race -timeout 30m -run '$(RACE_TESTS)' ./market/ ./web/

## test-postgres: the store's and the workflow's tests, and the web tests that book, pay, settle,
## dispute and sign in (PG_WEB_TESTS), again on PostgreSQL (a throwaway server from Debian's
## postgresql, or GPUMARKET_TEST_POSTGRES_URL), and the tests that run real replicas of the built
## server on PostgreSQL (REPLICA_TESTS: races, lease takeover, freshness under load, an outage)
PG_WEB_TESTS = TestAPI|TestPay|TestHostFailure|TestSettlement|TestBuyerIncident|TestProcessorEvents|TestChargeRefunded|TestCancel|TestDispute|TestMoney|TestExtend|TestMeasuredOutages|TestAdminRetries|TestBackgroundLoop|TestReserve|TestUnpaidHold|TestStatements|TestStripeFlow|TestReject|TestSignUp|TestLogin|TestSuspension|TestOfferLifecycle|TestCatalogueShowsFree|TestHealthz|TestAccessHandover|TestHostToken|TestModeration|TestQuotes|TestStandingOrder|TestSpot|TestResale|TestObservation|TestSimultaneousWrongCodes|TestOwnerTakesTheAccountBack|TestTemplates|TestFrozenDatabase|TestTooManyClients|TestAdminProvidersOrder|TestAskReplacement|TestAdminTriggersReplacement|TestEveryRouteRefusesUnstorableText|TestBuilderSaysUnstorableText
REPLICA_TESTS = TestReplicasOnOnePostgres|TestReplicasUnderLoadAndAnOutage|TestHealthzWaitsForTheChangeFeed
test-postgres:
	GPUMARKET_TEST_DB=postgres $(GO) test -count=1 -timeout 20m ./store/ ./workflow/
	$(GO) test -count=1 -timeout 10m -run '^($(REPLICA_TESTS))$$' ./cmd/gpumarket/
	GPUMARKET_TEST_DB=postgres $(GO) test -count=1 -timeout 20m -run '$(PG_WEB_TESTS)' ./web/

test-e2e:
	PLAYWRIGHT_NODEJS_PATH="$${PLAYWRIGHT_NODEJS_PATH:-$$(command -v node)}" \
		$(GO) test ./e2e/ -count=1 -v

## bench: run the benchmarks of every package but e2e, with allocations
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem $(UNIT_PKGS)

## loadtest: seed 100,000 offers, serve them on loopback, measure quotes and a yardstick with cmd/loadgen
loadtest: build
	$(BUILD) -o bin/loadgen ./cmd/loadgen
	bash scripts/loadtest.sh

## loadtest-replicas: narrow quotes/s from one and two replicas on one PostgreSQL, beside SQLite
loadtest-replicas: build
	$(BUILD) -o bin/loadgen ./cmd/loadgen
	bash scripts/loadtest-replicas.sh

## clean: remove build outputs and screenshots (keeps ./data, tools/ and the installed driver)
clean:
	rm -rf bin e2e/screenshots
	$(GO) clean -testcache
