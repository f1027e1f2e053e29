package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/wts-project/wts/actors"
	"github.com/wts-project/wts/actors/limits"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/cluster"
	httpapi "github.com/wts-project/wts/http"
	"github.com/wts-project/wts/http/auth"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/kernels/safetensors"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
	"github.com/wts-project/wts/providers/hub"
)

// modelFlags collects repeated --model NAME=DIR flags.
type modelFlags map[string]string

func (m modelFlags) String() string { return fmt.Sprint(map[string]string(m)) }

func (m modelFlags) Set(v string) error {
	name, dir, ok := strings.Cut(v, "=")
	if !ok || name == "" || dir == "" {
		return fmt.Errorf("want NAME=DIR, got %q", v)
	}
	m[name] = dir
	return nil
}

// offerFlags collects repeated --offer PROVIDER=MODEL[,MODEL...] flags.
type offerFlags map[string][]string

func (o offerFlags) String() string { return fmt.Sprint(map[string][]string(o)) }

func (o offerFlags) Set(v string) error {
	p, list, ok := strings.Cut(v, "=")
	if !ok || p == "" {
		return fmt.Errorf("want PROVIDER=MODEL[,MODEL...] (or PROVIDER= to offer none), got %q", v)
	}
	if !slices.Contains(providers.Order, p) {
		return fmt.Errorf("provider %q: want one of %v", p, providers.Order)
	}
	models := []string{}
	for _, m := range strings.Split(list, ",") {
		if m = strings.TrimSpace(m); m != "" {
			models = append(models, m)
		}
	}
	o[p] = append(o[p], models...)
	return nil
}

// defaultModel is the catalog entry of a node started without --model: the
// small generated model, written under the data folder on first start.
const defaultModel = "small"

func serveCmd(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	data := fs.String("data", "./data", "data folder: the store, the run volume and the default model")
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	models := modelFlags{}
	fs.Var(models, "model", "catalog entry NAME=DIR (HF layout); repeatable. Default: the small generated model")
	offers := offerFlags{}
	fs.Var(offers, "offer", "PROVIDER=MODEL[,MODEL...]: the catalog models a provider offers (default: every one); PROVIDER= offers none, so the provider is off; repeatable")
	maxBody := fs.Int("max-body", httpapi.DefaultMaxBody, "largest request body in bytes")
	drain := fs.Duration("drain", 30*time.Second, "on SIGTERM, how long executing work may take to finish")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	debugAddr := fs.String("debug-addr", "", "serve Go's pprof profiles on this address (keep it private; off when empty)")
	samplerIdle := fs.Duration("sampler-idle", 10*time.Minute, "how long an unused sampler keeps its adapter in memory")
	dedicated := fs.Int("dedicated-trainers", 16, "how many provider_a sessions may hold a dedicated trainer on this node at once; past every node's, provider_a is full (auto routing takes provider_b)")
	settleAfter := fs.Duration("settle-after", 10*time.Minute, "how long after it is observed provider_a's usage settles, as the provider's invoice would settle it (docs/billing.md)")
	grainIdle := fs.Duration("grain-idle", 10*time.Minute, "how long an idle session, run or sampler grain stays in memory before it passivates (it comes back from the store on its next message)")
	signingKey := fs.String("signing-key", "", "file of the 32-byte key that signs download links (default: DATA/secrets/signing.key, made on first start)")
	credentialsKey := credentialsKeyFlag(fs)
	engineNice := fs.Int("engine-nice", defaultEngineNice, "OS priority (nice, 0-19) of the engine's threads, below the API's (see docs/operations.md); 0 runs them at the node's own")
	hubEndpoint := fs.String("hub-endpoint", hub.DefaultEndpoint, "the model hub exports publish to (any endpoint that speaks the Hugging Face Hub protocol)")
	lim := limits.Default()
	fs.IntVar(&lim.RunQueue, "max-queue-run", lim.RunQueue, "operations one run (or sampler) may have queued or executing; more get 429 queue_full")
	fs.IntVar(&lim.OrgQueue, "max-queue-org", lim.OrgQueue, "operations an organization may have queued or executing on this node")
	fs.IntVar(&lim.NodeQueue, "max-queue-node", lim.NodeQueue, "operations the node takes queued or executing, all organizations together")
	fs.Int64Var(&lim.QueueBytes, "max-queue-bytes", lim.QueueBytes, "bytes of queued operations' records the node holds in memory")
	fs.IntVar(&lim.OrgSessions, "max-live-sessions", lim.OrgSessions, "live sessions per organization; more get 429 limit_exceeded")
	fs.IntVar(&lim.OrgRuns, "max-live-runs", lim.OrgRuns, "live runs per organization")
	advertise := fs.String("advertise", "", "HOST:PORT where the other nodes of a cluster reach this one's gossip (it also takes PORT+1 to PORT+3, see docs/cluster.md); set, the node is a cluster member and keeps its records in the cluster's store")
	join := fs.String("join", "", "HOST:PORT[,...] gossip addresses of cluster members to join (with --advertise; none starts a new cluster)")
	name := fs.String("name", "", "this node's name in the cluster, the same at every restart (default: from --advertise); its own files are in DATA/nodes/NAME")
	voters := fs.Int("voters", 3, "how many nodes serve the cluster's store (etcd voters): the first to join")
	bind := fs.String("bind", "", "with --advertise: the local host the node's four cluster ports listen on (default: the advertised host), for a node the others reach through NAT or a container's port mapping (e.g. 0.0.0.0)")
	role := fs.String("role", actors.RoleAll, "what this cluster node hosts: all, train (sessions and runs: their trainers) or sample (samplers: their sampling executors; while there are sample nodes, samplers keep off the train and all nodes)")
	budget := fs.Int64("memory-budget", defaultBudget(), "bytes the node may use in all (its GOMEMLIMIT is 0.9 of it unless set): the models, a quarter held back for the API and the engine's buffers, and the rest for trainers, samplers' adapters and KV caches (see docs/operations.md)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !slices.Contains(actors.Roles, *role) {
		return fmt.Errorf("--role %q: want one of %s", *role, strings.Join(actors.Roles, ", "))
	}
	if *bind != "" && *advertise == "" {
		return fmt.Errorf("--bind needs --advertise")
	}
	if *role != actors.RoleAll && *advertise == "" {
		return fmt.Errorf("--role %s needs --advertise: a node alone hosts everything", *role)
	}
	if *dedicated < 1 {
		return fmt.Errorf("--dedicated-trainers must be at least 1")
	}
	if lim.RunQueue < 1 || lim.OrgQueue < 1 || lim.NodeQueue < 1 || lim.QueueBytes < 1 || lim.OrgSessions < 1 || lim.OrgRuns < 1 {
		return fmt.Errorf("--max-queue-* and --max-live-* must be at least 1")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	tuneGC(log, *budget)
	if *engineNice < 0 || *engineNice > 19 {
		return fmt.Errorf("--engine-nice %d: want 0 to 19", *engineNice)
	}
	configureEngine(*engineNice, log)
	if len(models) == 0 {
		dir := filepath.Join(*data, "models", defaultModel)
		if _, err := os.Stat(filepath.Join(dir, "config.json")); errors.Is(err, os.ErrNotExist) {
			log.Info("generating the default model", "preset", defaultModel, "dir", dir)
			if err := model.Generate(defaultModel, 0, dir, safetensors.F32); err != nil {
				return fmt.Errorf("default model: %w", err)
			}
		}
		models[defaultModel] = dir
	}
	catalog, err := providers.NewCatalog(models)
	if err != nil {
		return err
	}
	registry, err := providers.NewRegistry(catalog, offers)
	if err != nil {
		return fmt.Errorf("--offer: %w", err)
	}
	var weights int64
	for _, n := range catalog.Names() {
		m, _ := catalog.Lookup(n)
		weights += 4 * m.Config.Values() // held as float32
		log.Info("catalog model", "base_model", n, "model_revision", m.Revision, "dir", m.Dir)
	}
	engine, err := enginePool(*budget, weights)
	if err != nil {
		return err
	}
	log.Info("memory budget", "budget_bytes", *budget, "model_bytes", weights, "engine_bytes", engine)
	acfg := actors.Config{DataDir: *data, Registry: registry, Log: log, HubEndpoint: *hubEndpoint, SamplerIdle: *samplerIdle, SettleAfter: *settleAfter, DedicatedTrainers: *dedicated, GrainIdle: *grainIdle,
		Wire:           os.Getenv("WTS_WIRE") == "1", // a test mode: every message msgpack-encoded, as between nodes
		CredentialsKey: *credentialsKey, Limits: lim, MemoryBudget: engine}
	own := *data // the node's own files: the admin socket (and in a cluster its store voter)
	var member *cluster.Member
	if *advertise == "" {
		if *join != "" {
			return fmt.Errorf("--join needs --advertise")
		}
		st, err := persistence.Open(filepath.Join(*data, "wts.db"))
		if err != nil {
			return err
		}
		st.AroundCheckpoint(withSpareProc)
		acfg.Store = st
	} else {
		if *name == "" {
			*name = strings.NewReplacer(":", "_", "[", "", "]", "").Replace(*advertise)
		}
		own = filepath.Join(*data, "nodes", *name)
		if member, err = cluster.Join(cluster.MemberConfig{Name: *name, Advertise: *advertise, Bind: *bind, Join: splitList(*join), Dir: own,
			BlobDir: filepath.Join(*data, "blobs"), Voters: *voters, Capacity: cluster.Capacity{Threads: runtime.GOMAXPROCS(0), Models: catalog.Names()}, Log: log}); err != nil {
			return err
		}
		defer member.Close()
		acfg.Store, acfg.Gossip, acfg.RemoteHost, acfg.RemotePort, acfg.RemoteBind = member.Store, member.Gossip, member.RemoteHost, member.RemotePort, member.RemoteBind
		acfg.Role = *role
	}
	sys, err := actors.Start(acfg)
	if err != nil {
		acfg.Store.Close() // Start may have closed it already: harmless
		return err
	}
	if err := firstKey(sys.Store()); err != nil {
		sys.Stop(context.Background())
		return err
	}
	if *debugAddr != "" {
		dl, err := net.Listen("tcp", *debugAddr)
		if err != nil {
			sys.Stop(context.Background())
			return fmt.Errorf("--debug-addr: %w", err)
		}
		go http.Serve(dl, nil) // net/http/pprof registers on the default mux
		log.Info("pprof", "addr", dl.Addr().String())
	}
	if admin, err := listenAdmin(own); err != nil {
		log.Warn("no admin socket: keys can be created only while the node is stopped", "err", err)
	} else {
		defer admin.Close()
		go httpapi.ServeAdmin(sys, admin)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		sys.Stop(context.Background())
		return err
	}
	if *signingKey == "" {
		*signingKey = persistence.SecretPath(*data, "signing")
	}
	key, err := persistence.Secret(*signingKey)
	if err != nil {
		sys.Stop(context.Background())
		return fmt.Errorf("signing key: %w", err)
	}
	srv := httpapi.New(sys, httpapi.Config{MaxBody: *maxBody, Log: log, Signer: persistence.NewSigner(key)})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("serving", "addr", ln.Addr().String(), "data", *data, "cluster", *advertise != "")
	fmt.Fprintf(os.Stderr, "wts: listening on http://%s\n", ln.Addr())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case err = <-served:
	case s := <-sig:
		log.Info("shutting down", "signal", s.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	if serr := srv.Shutdown(ctx); serr != nil && err == nil {
		err = serr
	}
	sys.Stop(ctx)
	log.Info("stopped")
	return err
}

// enginePool is the part of a node's memory budget left for trainers,
// samplers' adapters and KV caches: the budget less the models' weights and
// a quarter held back for the API, the store, the engine's activation
// buffers and the collector's headroom. A budget of 0 (unknown machine
// memory) bounds nothing.
func enginePool(budget, weights int64) (int64, error) {
	if budget <= 0 {
		return 0, nil
	}
	pool := budget - budget/4 - weights
	if pool <= 0 {
		return 0, fmt.Errorf("--memory-budget %d MiB leaves nothing for trainers and samplers beside %d MiB of model weights and a quarter held back", budget>>20, weights>>20)
	}
	return pool, nil
}

// listenAdmin opens the admin socket in the node's own folder (the data
// folder, or in a cluster DATA/nodes/NAME), owner-only. A socket left by a
// node that died is removed first: the store's file lock (or its etcd
// voter's), which this node already holds, says no other node serves this
// folder.
func listenAdmin(dir string) (net.Listener, error) {
	path := filepath.Join(dir, httpapi.AdminSocket)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	os.Remove(path)
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	return ln, nil
}

// firstKey prints a test key for a store that has none, so that a fresh
// node can be used at once. It is shown once; only its hash is kept.
func firstKey(st persistence.Store) error {
	empty := true
	err := st.View(func(tx persistence.Tx) error {
		return tx.Scan(persistence.Keys, nil, nil, func(_, _ []byte) (bool, error) {
			empty = false
			return false, nil
		})
	})
	if err != nil || !empty {
		return err
	}
	key, err := auth.Create(st, "default", false, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wts: first start; test API key for organization \"default\" (shown once):\n\n    %s\n\n", key)
	return nil
}

func keysCmd(args []string) error {
	return sub("keys", args, []command{{"create", "--org NAME [--live] [--data DIR] [--node NAME]", "make an API key of an organization (printed once)", keysCreate}})
}

func keysCreate(args []string) error {
	fs := flag.NewFlagSet("keys create", flag.ContinueOnError)
	org := fs.String("org", "", "organization the key belongs to")
	live := fs.Bool("live", false, "issue a svc_live_ key (default: svc_test_)")
	data := fs.String("data", "./data", "data folder of the node (a running node is asked through its admin socket there)")
	node := nodeFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *org == "" {
		return fmt.Errorf("keys create: --org is required")
	}
	// A running node holds the store: ask it through its admin socket.
	var reply httpapi.KeyReply
	sock, err := adminCall(*data, *node, "/admin/keys", httpapi.KeyRequest{Org: *org, Live: *live}, &reply)
	if err == nil {
		fmt.Println(reply.Key)
		return nil
	}
	st, err := persistence.Open(filepath.Join(*data, "wts.db"))
	if err != nil {
		return fmt.Errorf("keys create: %w (no node answers on %s either)", err, sock)
	}
	defer st.Close()
	key, err := auth.Create(st, *org, *live, time.Now())
	if err != nil {
		return err
	}
	fmt.Println(key)
	return nil
}

func credentialsCmd(args []string) error {
	return sub("credentials", args, []command{{"add", "--org NAME [--live] [--provider provider_a|provider_b] [--name LABEL] [--data DIR] < secret",
		"register a hub token (or, with --provider, a provider key for byok) read from standard input", credentialsAdd}})
}

func credentialsAdd(args []string) error {
	fs := flag.NewFlagSet("credentials add", flag.ContinueOnError)
	org := fs.String("org", "", "organization the credential belongs to")
	live := fs.Bool("live", false, "for the organization's svc_live_ keys (default: svc_test_)")
	name := fs.String("name", "", "a label to recognise it by")
	provider := fs.String("provider", "", "a key to this provider, which funds the organization's byok sessions (default: a model hub token, for exports)")
	data := fs.String("data", "./data", "data folder of the node (a running node is asked through its admin socket there)")
	node := nodeFlag(fs)
	credentialsKey := credentialsKeyFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *org == "" {
		return fmt.Errorf("credentials add: --org is required")
	}
	kind, what := protocol.CredentialHub, "hub token"
	switch *provider {
	case "":
	case providers.A, providers.B:
		kind, what = protocol.CredentialProvider, *provider+" key"
	default:
		return fmt.Errorf("credentials add: --provider must be %s or %s", providers.A, providers.B)
	}
	if *credentialsKey == "" {
		*credentialsKey = persistence.SecretPath(*data, "credentials")
	}
	// The token comes on standard input, never as an argument (which other
	// users of the machine can read in the process list).
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	token := strings.TrimSpace(line)
	if token == "" {
		return fmt.Errorf("credentials add: give the %s on standard input (%v)", what, err)
	}
	var reply httpapi.CredentialReply
	req := httpapi.CredentialRequest{Org: *org, Live: *live, Provider: *provider, Name: *name, Secret: token}
	sock, err := adminCall(*data, *node, "/admin/credentials", req, &reply)
	if err == nil {
		fmt.Println(reply.ID)
		return nil
	}
	st, err := persistence.Open(filepath.Join(*data, "wts.db"))
	if err != nil {
		return fmt.Errorf("credentials add: %w (no node answers on %s either)", err, sock)
	}
	defer st.Close()
	vault, err := persistence.OpenVault(*credentialsKey)
	if err != nil {
		return err
	}
	c, err := persistence.AddCredential(st, vault, persistence.Tenant{Org: *org, Live: *live}, kind, *provider, *name, []byte(token), time.Now().UTC())
	if err != nil {
		return err
	}
	fmt.Println(c.ID)
	return nil
}

// credentialsKeyFlag is the flag of the credentials key file, the same for
// the node and for registering credentials on a stopped one.
func credentialsKeyFlag(fs *flag.FlagSet) *string {
	return fs.String("credentials-key", "", "file of the 32-byte key that seals hub credentials (AES-256-GCM; default: DATA/secrets/credentials.key, made on first start)")
}

// nodeCmd prints a running node's devices and their capacity, and its
// grains in memory, as its admin socket reports them.
func nodeCmd(args []string) error {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	data := fs.String("data", "./data", "data folder of the running node")
	node := nodeFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	var reply httpapi.NodeReply
	if sock, err := adminCall(*data, *node, "/admin/node", nil, &reply); err != nil {
		return fmt.Errorf("node: no node answers on %s: %w", sock, err)
	}
	out, err := json.MarshalIndent(reply, "", "  ")
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}

// splitList splits a comma-separated flag, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, x := range strings.Split(v, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// nodeFlag names a cluster node whose admin socket (DATA/nodes/NAME) a
// command asks.
func nodeFlag(fs *flag.FlagSet) *string {
	return fs.String("node", "", "in a cluster, the node to ask (its name); default: the data folder's own node, else any cluster node there")
}

// adminCall asks a running node through its admin socket: node's in a
// cluster, else the data folder's own, else the first cluster node's that
// answers. It returns the socket it asked last.
func adminCall(data, node, path string, req, reply any) (string, error) {
	socks := []string{filepath.Join(data, httpapi.AdminSocket)}
	if node != "" {
		socks = []string{filepath.Join(data, "nodes", node, httpapi.AdminSocket)}
	} else if found, _ := filepath.Glob(filepath.Join(data, "nodes", "*", httpapi.AdminSocket)); len(found) > 0 {
		socks = append(socks, found...)
	}
	var err error
	for _, sock := range socks {
		if err = httpapi.AdminCall(sock, path, req, reply); err == nil {
			return sock, nil
		}
	}
	return socks[len(socks)-1], err
}
