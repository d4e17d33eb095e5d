# ctrlkit: the two commands a new user needs are "make demo" and "make test".
GO      ?= go
MODULES := . testenv bench e2e examples/website

.PHONY: demo test bench apiserver vet fuzz chaos election generate

## demo: the Foo sample controller end to end on the embedded API server (builds the server on first run)
demo:
	$(GO) run ./cmd/ctrlkit demo

## test: build the API server binary if this machine has none, then go test -race in every module (e2e drives Debian's chromium)
## (a package's binary may run 20 minutes: perturb's trials take 8 on two busy processors, near go test's default 10)
test: apiserver
	@set -e; for m in $(MODULES); do \
		echo "== go test -race -shuffle=on -timeout 20m ./... in $$m"; \
		(cd $$m && $(GO) test -race -shuffle=on -timeout 20m ./...); \
	done

## bench: ctrlkit and client-go side by side in one process: micro-benchmarks, then the scenarios (tables of ratios), the webhooks, and the mirror operator on ctrlkit and on controller-runtime as processes (operatorbench, about 30 minutes)
bench:
	cd bench && $(GO) test -run '^$$' -bench . -benchmem -count 6 ./... | tee bench.out
	cd bench && $(GO) run ./cmd/benchtable < bench.out
	cd bench && $(GO) run ./cmd/scenarios -rounds 3 -json scenarios.json
	cd bench && $(GO) run ./cmd/webhookbench
	cd bench && $(GO) run ./cmd/operatorbench -rounds 3 | tee operatorbench.md

## fuzz: every Fuzz function of the root module for FUZZTIME each (default 60s), from its committed seed corpus
FUZZTIME ?= 60s
fuzz:
	@set -e; for f in $$(grep -l '^func Fuzz' $$(git ls-files '*_test.go')); do \
		d=$$(dirname $$f); \
		for name in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "== $$name in ./$$d"; \
			$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) ./$$d; \
		done; \
	done

## chaos: TestChaos's long form: random writes, restarts, compactions, cuts and stalls against the real server for CHAOS_DURATION (make test runs a short form), then convergence checks; CHAOS_SEED=N replays a seed
CHAOS_DURATION ?= 10m
CHAOS_SEED     ?= 0
CHAOS_TIMEOUT  ?= 1h
chaos: apiserver
	$(GO) test -race -count=1 -v -timeout $(CHAOS_TIMEOUT) -run '^TestChaos$$' ./internal/chaos/ \
		-chaos.duration=$(CHAOS_DURATION) -chaos.seed=$(CHAOS_SEED)

## election: the leader-election failover test's long form: ELECTION_ROUNDS failovers (stall, SIGKILL, SIGTERM in turn) among 3 replica processes on the real server, gaps reported as min/median/max (make test runs 6)
ELECTION_ROUNDS ?= 30
election: apiserver
	$(GO) test -race -count=1 -v -timeout 30m -run '^TestLeaderElection_failovers' ./manager/ -election.rounds=$(ELECTION_ROUNDS)

## apiserver: build ctrlkit-apiserver into the per-machine cache (a few minutes the first time)
apiserver:
	$(GO) run ./cmd/ctrlkit apiserver build

## generate: rerun controller-gen (go tool controller-gen, pinned in go.mod) on examples/foo's markers: deep-copy, CRD, RBAC role
generate:
	$(GO) generate ./...

## vet: gofmt and go vet in every module
vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) vet ./...); done
