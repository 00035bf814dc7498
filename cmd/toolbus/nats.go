package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/deploy"
)

const (
	// natsDataName is the folder of `toolbus nats`'s store under the
	// user's state directory ([defaultNatsData]).
	natsDataName = "toolbus/nats"
	// maxNatsPayload is the largest --max-payload: the server's default
	// limit of the bytes pending for one client, which a message must fit.
	maxNatsPayload = 64 << 20
	// natsReadyPoll is how often startup asks whether JetStream is ready.
	natsReadyPoll = 20 * time.Millisecond
	// natsPatience is how long startup waits before it logs why JetStream
	// is not ready yet (in a cluster, the other nodes may not be up).
	natsPatience = 5 * time.Second
	// natsPasswordExt ends the name of the file, in the JetStream store's
	// directory, that keeps a role user's password: worker.password.
	natsPasswordExt = ".password"
)

// natsFlags are the flags of `toolbus nats`.
type natsFlags struct {
	listen     string
	data       string
	config     string
	token      string
	tokenFile  string
	monitor    string
	maxPayload int32
	noAuth     bool
}

func newNatsCmd() *cobra.Command {
	var f natsFlags
	cmd := &cobra.Command{
		Use:   "nats",
		Short: "Run a NATS server with JetStream for an ingress and workers to join",
		Long: `nats runs a NATS server with JetStream in the foreground until SIGINT or
SIGTERM, for an ingress and workers started as processes of their own. Once
JetStream is ready it prints the lines that join them.

The bus is never open by accident. Without --config, it has two users with
the least privilege of deploy/nats/cluster-secure.conf: "ingress", which
publishes calls and keeps the jobs, and "worker", which takes calls and
answers only those it received. Their passwords are generated at the first
start and kept in the --data directory (ingress.password and
worker.password, mode 0600), so that a restart keeps them and the parts
reconnect; each part reads its own with --nats-user and --nats-password-file.
The permissions are those of the subject prefix "toolbus".

--nats-token or --token-file give instead one token that can do everything:
any client holding it can publish calls as any caller, answer any call and
read every job record. Choose it on purpose, for your own processes alone.

--config reads a nats-server configuration file for cluster routes,
accounts, users, permissions and TLS; the flags --nats-listen, --data,
--monitor-listen and --max-payload, when given, override the file, and
otherwise fill in what it leaves out. A file with no authorization of its own
needs --nats-token or --token-file, or --no-auth to run an open bus on purpose.
JetStream is always on.`,
		Example: `  toolbus nats
  toolbus nats --data /var/lib/toolbus-nats
  toolbus nats --token-file toolbus-nats.token
  toolbus nats --config deploy/nats/cluster-secure.conf --data /data`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd.Context(), cmd.OutOrStdout(), cmd.Flags().Changed)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "nats-listen", "127.0.0.1:4222", "host:port NATS clients connect to (port 0 picks a free port)")
	fl.StringVar(&f.data, "data", defaultNatsData(), "directory of the JetStream store and of the users' password files, kept across restarts; by default in the user's state directory, never in a working tree where git would pick the passwords up")
	fl.StringVar(&f.config, "config", "", "nats-server configuration file: cluster routes, accounts, users, permissions, TLS")
	fl.StringVar(&f.token, "nats-token", "", "one all-powerful token instead of the users ingress and worker: a client with it can act as any caller and any worker and read every job record")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding one all-powerful token instead of the users ingress and worker; made with a generated token (mode 0600) when missing, and never printed")
	fl.StringVar(&f.monitor, "monitor-listen", "", "host:port of the HTTP monitoring endpoints /healthz, /varz, /jsz (port 0 picks a free port; empty for none)")
	fl.Int32Var(&f.maxPayload, "max-payload", bus.DefaultEmbeddedMaxPayload, "largest message in bytes, the same as toolbus dev's")
	fl.BoolVar(&f.noAuth, "no-auth", false, "run an open bus: anyone who reaches it can act as any caller and any worker")
	return cmd
}

// run starts the server, prints how to join it once JetStream is ready,
// and shuts it down when ctx ends or SIGINT or SIGTERM arrives. given
// reports whether a flag was set on the command line or by its variable.
func (f *natsFlags) run(ctx context.Context, out io.Writer, given func(flag string) bool) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts, access, err := f.options(given)
	if err != nil {
		return err
	}
	log := slog.Default()
	fatal := make(chan string, 1)
	srv, err := startNats(ctx, opts, serverLog{log: log, fatal: fatal})
	if err != nil || srv == nil {
		return err
	}
	if access.open {
		log.Warn("the NATS server is open (--no-auth): anyone who reaches it can act as any caller and any worker")
	}
	access.printReady(out, srv, opts)
	select {
	case <-ctx.Done():
		log.Info("shutting down the NATS server")
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil
	case msg := <-fatal:
		srv.Shutdown()
		srv.WaitForShutdown()
		return fmt.Errorf("the NATS server stopped: %s", msg)
	}
}

// options reads the configuration file, if any, applies the flags given
// and the defaults of what the file leaves out, settles how clients
// authenticate, and checks that the server can store and listen where it
// is told to.
func (f *natsFlags) options(given func(flag string) bool) (*server.Options, natsAccess, error) {
	opts := &server.Options{}
	if f.config != "" {
		if err := readConfig(opts, f.config); err != nil {
			return nil, natsAccess{}, err
		}
	}
	// fromFlag records the settings taken from a flag (given, or its
	// default), so that an error names what to change.
	fromFlag := map[string]bool{}
	if given("nats-listen") || (opts.Host == "" && opts.Port == 0) {
		host, port, err := splitListen("--nats-listen", f.listen)
		if err != nil {
			return nil, natsAccess{}, err
		}
		opts.Host, opts.Port, fromFlag["nats-listen"] = host, port, true
	}
	if given("monitor-listen") || f.config == "" {
		opts.HTTPHost, opts.HTTPPort, opts.HTTPSPort, fromFlag["monitor-listen"] = "", 0, 0, true
		if f.monitor != "" {
			host, port, err := splitListen("--monitor-listen", f.monitor)
			if err != nil {
				return nil, natsAccess{}, err
			}
			opts.HTTPHost, opts.HTTPPort = host, port
		}
	}
	if given("data") || opts.StoreDir == "" {
		if f.data == "" {
			return nil, natsAccess{}, errors.New("--data is empty: name the directory of the JetStream store")
		}
		opts.StoreDir, fromFlag["data"] = f.data, true
	}
	if given("max-payload") || opts.MaxPayload == 0 {
		if f.maxPayload <= 0 || f.maxPayload > maxNatsPayload {
			return nil, natsAccess{}, fmt.Errorf("--max-payload %d is out of range: give 1 to %d bytes", f.maxPayload, maxNatsPayload)
		}
		opts.MaxPayload = f.maxPayload
	}
	opts.JetStream = true
	// This command handles the signals; the server's own handler would
	// end the process without the orderly shutdown.
	opts.NoSigs = true

	access, err := f.access(opts)
	if err != nil {
		return nil, natsAccess{}, err
	}
	// fix says what to change about a setting: the flag it came from, or
	// the file's item and the flag that overrides it.
	fix := func(flag, item, noun string) string {
		switch {
		case fromFlag[flag]:
			return fmt.Sprintf("choose another %s with --%s", noun, flag)
		case flag != "":
			return fmt.Sprintf("change %s in %s, or override it with --%s", item, f.config, flag)
		}
		return fmt.Sprintf("change %s in %s", item, f.config)
	}
	for _, l := range []struct {
		host       string
		port       int
		flag, item string
	}{
		{opts.Host, opts.Port, "nats-listen", "listen"},
		{opts.HTTPHost, max(opts.HTTPPort, opts.HTTPSPort), "monitor-listen", "http"},
		{opts.Cluster.Host, opts.Cluster.Port, "", "the cluster's listen"},
	} {
		if l.port <= 0 {
			continue // none, or a free port the server picks
		}
		if err := checkListen(net.JoinHostPort(l.host, strconv.Itoa(l.port)), fix(l.flag, l.item, "address")); err != nil {
			return nil, natsAccess{}, err
		}
	}
	// The store, the token file and the password files come last, so that
	// a start refused for any other reason leaves nothing behind.
	if err := os.MkdirAll(opts.StoreDir, 0o750); err != nil {
		return nil, natsAccess{}, fmt.Errorf("cannot create the JetStream store %s (%v): %s", opts.StoreDir, rootCause(err), fix("data", "store_dir", "directory"))
	}
	if access.tokenFile != "" {
		if access.token, access.made, err = tokenFromFile(access.tokenFile); err != nil {
			return nil, natsAccess{}, err
		}
		opts.Authorization = access.token
	}
	if len(access.roles) > 0 {
		if opts.Users, access.made, err = roleUsers(access.roles); err != nil {
			return nil, natsAccess{}, err
		}
	}
	return opts, access, nil
}

// roleUsers returns the server's users for roles, each with the
// permissions nats/cluster-secure.conf gives it and the password kept in
// its file, made at the first start; made tells whether any password was
// made at this start.
func roleUsers(roles []natsRole) (users []*server.User, made bool, err error) {
	perms, err := deploy.Permissions()
	if err != nil {
		return nil, false, fmt.Errorf("the permissions built into this program are unusable, so the bus cannot be closed with them (%w); give --config with users of your own", err)
	}
	users = make([]*server.User, 0, len(roles))
	for _, r := range roles {
		p := perms[r.user]
		if p == nil {
			return nil, false, fmt.Errorf("the permissions built into this program have no user %q; give --config with users of your own", r.user)
		}
		password, new, err := passwordFromFile(r.user, r.passwordFile)
		if err != nil {
			return nil, false, err
		}
		made = made || new
		users = append(users, &server.User{Username: r.user, Password: password, Permissions: p})
	}
	return users, made, nil
}

// readConfig reads the nats-server configuration file path into opts. It
// logs the file's warnings (an unknown item, say) and returns its errors
// as one line.
func readConfig(opts *server.Options, path string) error {
	err := opts.ProcessConfigFile(path)
	if err == nil {
		return nil
	}
	var list interface {
		Errors() []error
		Warnings() []error
	}
	if !errors.As(err, &list) {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("cannot read --config %s (%w): give the path of a nats-server configuration file", path, pe.Err)
		}
		return fmt.Errorf("--config %s is not a usable NATS configuration: %s", path, strings.TrimSpace(err.Error()))
	}
	for _, w := range list.Warnings() {
		slog.Warn("NATS configuration", "config", path, "warning", w.Error())
	}
	if len(list.Errors()) == 0 {
		return nil
	}
	errs := make([]string, len(list.Errors()))
	for i, e := range list.Errors() {
		errs[i] = e.Error()
	}
	return fmt.Errorf("--config %s is not a usable NATS configuration: %s", path, strings.Join(errs, "; "))
}

// splitListen reads the host:port address of flag; port 0 picks a free
// port.
func splitListen(flag, addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%s %q is not a host:port address such as 127.0.0.1:4222", flag, addr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}

// rootCause returns the innermost error of err, such as "permission
// denied" of "mkdir /x: permission denied", for sentences that name the
// path or address themselves.
func rootCause(err error) error {
	for {
		inner := errors.Unwrap(err)
		if inner == nil {
			return err
		}
		err = inner
	}
}

// natsAccess is how clients join the server, as the ready lines say.
type natsAccess struct {
	token     string     // the token clients present, or "" for none
	tokenFile string     // the file keeping token; when set the token is not shown
	made      bool       // the token or the passwords were made at this start, not kept from an earlier one
	users     string     // the configuration file whose users clients join as
	roles     []natsRole // the users made without a configuration file
	open      bool       // anyone may join (--no-auth)
}

// natsRole is a user `toolbus nats` makes when it has no configuration
// file: one of [deploy.Users], whose password is kept in passwordFile.
type natsRole struct {
	user         string
	passwordFile string
}

// access settles how clients authenticate and sets opts to match: the
// file's own authorization, a token or, asked for explicitly, none; and
// without any of those, the users of nats/cluster-secure.conf with
// passwords kept in the store's directory.
func (f *natsFlags) access(opts *server.Options) (natsAccess, error) {
	own := f.config != "" && authorizes(opts)
	token := f.token != "" || f.tokenFile != ""
	switch {
	case f.token != "" && f.tokenFile != "":
		return natsAccess{}, errors.New("--nats-token and --token-file both give the token: keep one of them")
	case f.noAuth && token:
		return natsAccess{}, errors.New("--no-auth opens the bus that a token would close: keep one of them")
	case own && f.noAuth:
		return natsAccess{}, fmt.Errorf("%s has an authorization of its own, which --no-auth would not remove: drop --no-auth", f.config)
	case own && token:
		return natsAccess{}, fmt.Errorf("%s has an authorization of its own: drop --nats-token and --token-file, or put the token in the file", f.config)
	case own:
		return natsAccess{users: f.config}, nil
	case f.noAuth:
		return natsAccess{open: true}, nil
	case f.config != "" && !token:
		return natsAccess{}, fmt.Errorf("%s has no authorization, so anyone could use the bus: add users to it, give --nats-token or --token-file, or give --no-auth to run an open bus on purpose", f.config)
	case !token:
		// The password files are read, or made, once every other check
		// has passed.
		var a natsAccess
		for _, u := range deploy.Users {
			a.roles = append(a.roles, natsRole{user: u, passwordFile: filepath.Join(opts.StoreDir, u+natsPasswordExt)})
		}
		return a, nil
	}
	// A token file is read, or made, once every other check has passed.
	opts.Authorization = f.token
	return natsAccess{token: f.token, tokenFile: f.tokenFile}, nil
}

// authorizes reports whether a server configuration authenticates clients
// by itself: with users, nkeys, a token, operator JWTs, an auth callout or
// client certificates it verifies.
func authorizes(o *server.Options) bool {
	return len(o.Users) > 0 || len(o.Nkeys) > 0 || o.Username != "" || o.Authorization != "" ||
		len(o.TrustedOperators) > 0 || len(o.TrustedKeys) > 0 || o.AuthCallout != nil || o.TLSVerify
}

// tokenFromFile reads the token kept in path or, when there is no such
// file, makes one and keeps it there, readable by this user alone, so
// that a restart keeps the token its clients know.
func tokenFromFile(path string) (token string, made bool, err error) {
	return secretFile{
		path: path, named: "--token-file " + path, what: "a token",
		fixCreate: "give a path in a directory this user can write",
		fixWrite:  "give a path on a writable file system",
		make:      bus.NewToken,
	}.read()
}

// passwordFromFile reads the password of user kept in path or, when there
// is no such file, makes one and keeps it there, readable by this user
// alone, so that a restart keeps the password the ingress and workers
// read from it with --nats-password-file.
func passwordFromFile(user, path string) (password string, made bool, err error) {
	return secretFile{
		path: path, named: "the password file " + path + " of NATS user " + user, what: "a password",
		fixCreate: "give --data a directory this user can write",
		fixWrite:  "give --data a directory on a writable file system",
		make: func() string {
			c, err := deploy.NewCredentials(user)
			if err != nil {
				panic(err) // the users are deploy's own, whose names it accepts
			}
			return c.Password(user)
		},
	}.read()
}

// secretFile is a file that keeps a secret across restarts: a token or a
// password.
type secretFile struct {
	path      string
	named     string // how a sentence names the file
	what      string // what it holds, as in "put a token in it"
	fixCreate string // what to do when it cannot be created
	fixWrite  string // what to do when it cannot be written
	make      func() string
}

// read returns the secret kept in the file, without surrounding white
// space such as the final newline or, when there is no file, a new one
// from make, written to a new file of mode 0600.
func (f secretFile) read() (secret string, made bool, err error) {
	// Of two starts at once, one makes the file and the other reads it.
	for range 2 {
		var b []byte
		b, err = os.ReadFile(f.path)
		switch {
		case err == nil:
			secret = strings.TrimSpace(string(b))
			if secret == "" {
				return "", false, fmt.Errorf("%s is empty: put %s in it, or remove it to have one made", f.named, f.what)
			}
			return secret, false, nil
		case !errors.Is(err, fs.ErrNotExist):
			return "", false, fmt.Errorf("cannot read %s; give a file this user can read: %w", f.named, rootCause(err))
		}
		secret = f.make()
		fh, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", false, fmt.Errorf("cannot create %s; %s: %w", f.named, f.fixCreate, rootCause(err))
		}
		_, err = fh.WriteString(secret + "\n")
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(f.path)
			return "", false, fmt.Errorf("cannot write %s; %s: %w", f.named, f.fixWrite, rootCause(err))
		}
		return secret, true, nil
	}
	return "", false, fmt.Errorf("cannot read %s, which another process made and removed at once: start again", f.named)
}

// startNats starts a server with opts and waits until JetStream is ready
// (in a cluster: until the nodes have elected a meta leader), as the
// server's /healthz tells. It returns a nil server and error when ctx ends
// first.
func startNats(ctx context.Context, opts *server.Options, log serverLog) (*server.Server, error) {
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("the NATS server refused its settings (%v): fix the flags or the configuration file", err)
	}
	debug := opts.Debug || log.log.Enabled(ctx, slog.LevelDebug)
	srv.SetLoggerV2(log, debug, opts.Trace, opts.TraceVerbose)
	srv.Start()
	stop := func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
	tick := time.NewTicker(natsReadyPoll)
	defer tick.Stop()
	patient := time.Now().Add(natsPatience)
	var waiting string
	for {
		h := srv.Healthz(nil)
		if h.StatusCode == http.StatusOK {
			return srv, nil
		}
		if time.Now().After(patient) && h.Error != waiting {
			waiting = h.Error
			log.log.Info("waiting for JetStream", "reason", waiting)
		}
		select {
		case msg := <-log.fatal:
			stop()
			return nil, fmt.Errorf("the NATS server did not start: %s", msg)
		case <-ctx.Done():
			stop()
			return nil, nil
		case <-tick.C:
		}
	}
}

// serverLog passes the NATS server's log to slog, and its fatal errors,
// which would end the process under the server's own logger, to fatal.
type serverLog struct {
	log   *slog.Logger
	fatal chan string
}

var _ server.Logger = serverLog{}

func (l serverLog) Noticef(format string, v ...any) { l.log.Info(fmt.Sprintf(format, v...)) }
func (l serverLog) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l serverLog) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l serverLog) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l serverLog) Tracef(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }

func (l serverLog) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg)
	select {
	case l.fatal <- msg:
	default: // the first fatal error is the one reported
	}
}

// printReady writes the ready lines: the server's URL, its store and
// monitoring address, and the commands that join an ingress and a worker
// to it.
func (a natsAccess) printReady(w io.Writer, srv *server.Server, opts *server.Options) {
	scheme := "nats"
	if opts.TLSConfig != nil {
		scheme = "tls"
	}
	url := scheme + "://" + reachable(srv.Addr())
	fmt.Fprintf(w, "toolbus nats ready: %s\n", url)
	if store, err := filepath.Abs(opts.StoreDir); err == nil {
		fmt.Fprintf(w, "JetStream store: %s\n", store)
	}
	if m := srv.MonitorAddr(); m != nil {
		scheme := "http"
		if opts.HTTPSPort != 0 {
			scheme = "https"
		}
		fmt.Fprintf(w, "monitoring: %s://%s/healthz\n", scheme, reachable(m))
	}
	header, note := "join with:", ""
	// auth is the flags of each part, by the user it joins as, or by ""
	// for every part.
	auth := map[string]string{}
	switch {
	case a.open:
		fmt.Fprintln(w, "this bus is open (--no-auth): anyone who reaches it can act as any caller and any worker")
	case a.users != "":
		header = fmt.Sprintf("join as a user of %s (add --nats-user and --nats-password, --nats-nkey or --nats-creds):", a.users)
	case len(a.roles) > 0:
		kept := "kept from an earlier start"
		if a.made {
			kept = "made now"
		}
		header = "join with (each part as its own NATS user; passwords " + kept + ", and kept across restarts):"
		for _, r := range a.roles {
			path, err := filepath.Abs(r.passwordFile)
			if err != nil {
				path = r.passwordFile
			}
			auth[r.user] = " --nats-user " + shellQuote(r.user) + " --nats-password-file " + shellQuote(path)
		}
	case a.tokenFile != "":
		path, err := filepath.Abs(a.tokenFile)
		if err != nil {
			path = a.tokenFile
		}
		auth[""] = " --token-file " + shellQuote(path)
		note = allPowerful
		if a.made {
			note += " (made now, and kept in the file across restarts)"
		} else {
			note += " (kept in the file from an earlier start)"
		}
	default:
		auth[""] = " --nats-token " + shellQuote(a.token)
		note = allPowerful
	}
	fmt.Fprintln(w, header)
	for _, part := range []string{"ingress", "worker"} {
		as, ok := auth[part]
		if !ok {
			as = auth[""]
		}
		fmt.Fprintf(w, "  toolbus %s --nats %s%s\n", part, url, as)
	}
	if note != "" {
		fmt.Fprintln(w, note)
	}
}

const (
	// allPowerful says what a token of `toolbus nats` and `toolbus dev`
	// allows, under the lines that join with it.
	allPowerful = "this token is all-powerful: a client with it can publish calls as any caller, answer any call and read every job record"
	// devTokenUse says, after allPowerful, what the token of `toolbus
	// dev` is for.
	devTokenUse = "so give it only to your own workers on this machine; for anything shared, run toolbus nats, ingress and worker separately, each part as its own NATS user"
)

// reachable returns addr as a host:port a client on this machine can
// dial: an unspecified address (0.0.0.0, ::) becomes the loopback one.
func reachable(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return addr.String()
	}
	ip := tcp.IP
	switch {
	case ip == nil, ip.IsUnspecified() && ip.To4() != nil:
		ip = net.IPv4(127, 0, 0, 1)
	case ip.IsUnspecified():
		ip = net.IPv6loopback
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(tcp.Port))
}

// shellSafe matches the words a POSIX shell reads unchanged.
var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:=@%+-]+$`)

// shellQuote returns s as one word for a POSIX shell.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// defaultNatsData is the JetStream store of `toolbus nats` when neither
// --data nor the configuration file names one: it outlives the process, as
// jobs, idempotency records and the users' passwords must survive a
// restart, and it lies in the user's state directory
// ($XDG_STATE_HOME/toolbus/nats, or ~/.local/state/toolbus/nats), outside
// any working tree, since it holds secrets. Without a home directory it
// is ./toolbus-nats, which the repository's .gitignore leaves out.
func defaultNatsData() string {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, natsDataName)
	}
	if home, err := os.UserHomeDir(); err == nil && filepath.IsAbs(home) {
		return filepath.Join(home, ".local", "state", natsDataName)
	}
	return "toolbus-nats"
}
