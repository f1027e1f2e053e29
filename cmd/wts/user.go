package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/wts-project/wts/http/client"
)

// The commands a user of a running service reaches for: they talk to it
// over HTTP with the Go client, as any caller would.

// userFlags are the flags every user command takes: where the service
// is, the key, and whether to print JSON.
type userFlags struct {
	url, key string
	json     bool
}

func (u *userFlags) register(fs *flag.FlagSet) {
	url := os.Getenv("WTS_URL")
	if url == "" {
		url = "http://127.0.0.1:8080"
	}
	fs.StringVar(&u.url, "url", url, "the service (env WTS_URL)")
	fs.StringVar(&u.key, "key", os.Getenv("WTS_API_KEY"), "an API key (env WTS_API_KEY)")
	fs.BoolVar(&u.json, "json", false, "print the service's JSON instead of a table")
}

func (u *userFlags) client() *client.Client { return client.New(u.url, u.key) }

// userCmd parses a user command's flags (args: the words after the
// command) and wants exactly nArgs positional arguments named by argNames.
func userCmd(name, argNames string, nArgs int, args []string, extra func(*flag.FlagSet)) (*userFlags, []string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var u userFlags
	u.register(fs)
	if extra != nil {
		extra(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: wts %s [flags] %s\n", name, argNames)
		fs.PrintDefaults()
	}
	// Flags may come before, between or after the arguments.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if len(pos) != nArgs {
		fs.Usage()
		return nil, nil, fmt.Errorf("%s: want %s", name, strings.TrimSpace(argNames+" (nothing else)"))
	}
	return &u, pos, nil
}

// signalled is a context that ends on Ctrl-C.
func signalled() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt)
}

// show prints v as indented JSON.
func show(v any) error {
	e := json.NewEncoder(os.Stdout)
	e.SetIndent("", "  ")
	return e.Encode(v)
}

// table prints rows under a header, aligned.
func table(header string, rows [][]any) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, header)
	for _, r := range rows {
		for i, c := range r {
			if i > 0 {
				fmt.Fprint(w, "\t")
			}
			fmt.Fprint(w, c)
		}
		fmt.Fprintln(w)
	}
	return w.Flush()
}

func when(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05") }

func sessionsCmd(args []string) error {
	return sub("sessions", args, []command{
		{"list", "", "the caller's sessions, newest first", func(args []string) error {
			var limit int
			u, _, err := userCmd("sessions list", "", 0, args, func(fs *flag.FlagSet) { fs.IntVar(&limit, "limit", 20, "how many (1-500)") })
			if err != nil {
				return err
			}
			ctx, stop := signalled()
			defer stop()
			p, err := u.client().ListSessions(ctx, "", limit)
			if err != nil || u.json {
				return orShow(p, err)
			}
			var rows [][]any
			for _, s := range p.Items {
				rows = append(rows, []any{s.ID, s.Status, s.Provider, s.RunID, when(s.CreatedAt)})
			}
			return table("ID\tSTATUS\tPROVIDER\tRUN\tCREATED", rows)
		}},
		{"show", "SESSION_ID", "a session", func(args []string) error {
			u, a, err := userCmd("sessions show", "SESSION_ID", 1, args, nil)
			if err != nil {
				return err
			}
			ctx, stop := signalled()
			defer stop()
			return orShow(u.client().GetSession(ctx, a[0]))
		}},
		{"close", "SESSION_ID", "close a session (its run is cancelled if it has not ended)", func(args []string) error {
			u, a, err := userCmd("sessions close", "SESSION_ID", 1, args, nil)
			if err != nil {
				return err
			}
			ctx, stop := signalled()
			defer stop()
			return orShow(u.client().CloseSession(ctx, a[0]))
		}},
	})
}

func runsCmd(args []string) error {
	return sub("runs", args, []command{
		{"list", "", "the caller's runs, newest first", func(args []string) error {
			var limit int
			u, _, err := userCmd("runs list", "", 0, args, func(fs *flag.FlagSet) { fs.IntVar(&limit, "limit", 20, "how many (1-500)") })
			if err != nil {
				return err
			}
			ctx, stop := signalled()
			defer stop()
			p, err := u.client().ListRuns(ctx, "", limit)
			if err != nil || u.json {
				return orShow(p, err)
			}
			var rows [][]any
			for _, r := range p.Items {
				rows = append(rows, []any{r.ID, r.Status, r.BaseModel, r.LoRA.Rank, r.NextSeqID - 1, r.LatestWeightVersion, when(r.CreatedAt)})
			}
			return table("ID\tSTATUS\tMODEL\tRANK\tOPS\tWEIGHTS\tCREATED", rows)
		}},
		{"show", "RUN_ID", "a run, with its metrics' summary", func(args []string) error {
			u, a, err := userCmd("runs show", "RUN_ID", 1, args, nil)
			if err != nil {
				return err
			}
			ctx, stop := signalled()
			defer stop()
			c := u.client()
			r, err := c.GetRun(ctx, a[0])
			if err != nil {
				return err
			}
			m, err := c.Metrics(ctx, a[0], 0, 1)
			if err != nil {
				return err
			}
			return show(map[string]any{"run": r, "metrics_summary": m.Summary})
		}},
		{"finish", "RUN_ID", "finish a run once its queued operations are done, and wait for it", func(args []string) error {
			u, a, err := userCmd("runs finish", "RUN_ID", 1, args, nil)
			if err != nil {
				return err
			}
			ctx, stop := signalled()
			defer stop()
			c := u.client()
			op, err := c.FinishRun(ctx, a[0])
			if err != nil {
				return err
			}
			return wait(ctx, c, op)
		}},
	})
}

func opsCmd(args []string) error {
	return sub("ops", args, []command{
		{"list", "RUN_ID", "a run's operations in seq_id order", func(args []string) error {
			var after int64
			var limit int
			u, a, err := userCmd("ops list", "RUN_ID", 1, args, func(fs *flag.FlagSet) {
				fs.Int64Var(&after, "after", 0, "list from after this seq_id")
				fs.IntVar(&limit, "limit", 100, "how many (1-500)")
			})
			if err != nil {
				return err
			}
			ctx, stop := signalled()
			defer stop()
			p, err := u.client().ListOperations(ctx, a[0], after, limit)
			if err != nil || u.json {
				return orShow(p, err)
			}
			var rows [][]any
			for _, op := range p.Items {
				rows = append(rows, []any{op.SeqID, op.ID, op.Kind, op.Status, op.UpdatedAt.Sub(op.CreatedAt).Round(time.Millisecond), deref(op.ErrorCode)})
			}
			return table("SEQ\tID\tKIND\tSTATUS\tTOOK\tERROR", rows)
		}},
		{"show", "OPERATION_ID", "an operation", func(args []string) error {
			u, a, err := userCmd("ops show", "OPERATION_ID", 1, args, nil)
			if err != nil {
				return err
			}
			ctx, stop := signalled()
			defer stop()
			return orShow(u.client().GetOperation(ctx, a[0]))
		}},
		{"wait", "OPERATION_ID", "wait for an operation to end, showing its progress", func(args []string) error {
			u, a, err := userCmd("ops wait", "OPERATION_ID", 1, args, nil)
			if err != nil {
				return err
			}
			ctx, stop := signalled()
			defer stop()
			c := u.client()
			op, err := c.GetOperation(ctx, a[0])
			if err != nil {
				return err
			}
			return wait(ctx, c, op)
		}},
	})
}

// wait polls op to its end, with a status line on standard error, and
// prints it; an operation that did not succeed is an error.
func wait(ctx context.Context, c *client.Client, op *client.Operation) error {
	line := func(op *client.Operation) {
		s := fmt.Sprintf("%s %s #%d: %s", op.ID, op.Kind, op.SeqID, op.Status)
		if p := op.Progress; p != nil {
			s += fmt.Sprintf(", %d/%d tokens, %.0f tokens/s", p.TokensDone, p.TokensTotal, p.TokensPerS)
			if p.SequencesDone != nil {
				s += fmt.Sprintf(", %d/%d sequences", *p.SequencesDone, *p.SequencesTotal)
			}
		}
		fmt.Fprintf(os.Stderr, "\r\033[K%s", s)
	}
	line(op)
	op, err := c.Wait(ctx, op, line)
	fmt.Fprintln(os.Stderr)
	if err != nil {
		return err
	}
	if err := show(op); err != nil {
		return err
	}
	if op.Status != "succeeded" {
		return fmt.Errorf("operation %s %s: %s", op.ID, op.Status, deref(op.ErrorCode))
	}
	return nil
}

func checkpointsCmd(args []string) error {
	u, a, err := userCmd("checkpoints", "RUN_ID", 1, args, nil)
	if err != nil {
		return err
	}
	ctx, stop := signalled()
	defer stop()
	p, err := u.client().ListCheckpoints(ctx, a[0], 0, 500)
	if err != nil || u.json {
		return orShow(p, err)
	}
	var rows [][]any
	for _, cp := range p.Items {
		rows = append(rows, []any{cp.ID, cp.Name, cp.Step, cp.SizeBytes, cp.Status, when(cp.CreatedAt)})
	}
	return table("ID\tNAME\tSTEP\tBYTES\tSTATUS\tCREATED", rows)
}

func artifactsCmd(args []string) error {
	u, a, err := userCmd("artifacts", "RUN_ID", 1, args, nil)
	if err != nil {
		return err
	}
	ctx, stop := signalled()
	defer stop()
	p, err := u.client().ListArtifacts(ctx, a[0], 0, 500)
	if err != nil || u.json {
		return orShow(p, err)
	}
	var rows [][]any
	for _, ar := range p.Items {
		rows = append(rows, []any{ar.ID, ar.Kind, ar.SizeBytes, len(ar.Files), ar.Status, when(ar.CreatedAt)})
	}
	return table("ID\tKIND\tBYTES\tFILES\tSTATUS\tCREATED", rows)
}

func exportsCmd(args []string) error {
	u, a, err := userCmd("exports", "EXPORT_ID", 1, args, nil)
	if err != nil {
		return err
	}
	ctx, stop := signalled()
	defer stop()
	return orShow(u.client().GetExport(ctx, a[0]))
}

func modelsCmd(args []string) error {
	u, _, err := userCmd("models", "", 0, args, nil)
	if err != nil {
		return err
	}
	ctx, stop := signalled()
	defer stop()
	ms, err := u.client().Models(ctx)
	if err != nil || u.json {
		return orShow(ms, err)
	}
	var rows [][]any
	for _, m := range ms {
		rows = append(rows, []any{m.Name, m.Revision, m.Architecture, m.Parameters, m.MaxSeqLen, m.Tokenizer, strings.Join(m.Providers, ",")})
	}
	return table("NAME\tREVISION\tARCH\tPARAMS\tMAX_SEQ\tTOKENIZER\tPROVIDERS", rows)
}

// downloadCmd fetches an artifact's files through signed links, with a
// progress bar, and checks each file's SHA-256.
func downloadCmd(args []string) error {
	var format, out string
	u, a, err := userCmd("download", "ARTIFACT_ID", 1, args, func(fs *flag.FlagSet) {
		fs.StringVar(&format, "format", "peft", "peft (the adapter) or merged (the base with the adapter folded in)")
		fs.StringVar(&out, "out", "", "the folder to write (default: ./ARTIFACT_ID)")
	})
	if err != nil {
		return err
	}
	ctx, stop := signalled()
	defer stop()
	c := u.client()
	links, err := c.DownloadLinks(ctx, a[0], format)
	if err != nil {
		return err
	}
	if out == "" {
		out = a[0]
	}
	for _, f := range links.Files {
		path := filepath.Join(out, filepath.FromSlash(f.Path))
		if !filepath.IsLocal(filepath.FromSlash(f.Path)) {
			return fmt.Errorf("the service named a file outside the folder: %q", f.Path)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := fetch(ctx, c, f.URL, f.SHA256, f.SizeBytes, path); err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
	}
	fmt.Println(out)
	return nil
}

// fetch writes one file (through a temporary name, so a cut download
// leaves nothing that looks whole), drawing a bar on standard error.
func fetch(ctx context.Context, c *client.Client, url, sha string, size int64, path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".download-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	start := time.Now()
	bar := func(done int64) {
		frac := 1.0
		if size > 0 {
			frac = float64(done) / float64(size)
		}
		rate := float64(done) / max(time.Since(start).Seconds(), 1e-3) / 1e6
		fmt.Fprintf(os.Stderr, "\r\033[K%-40s [%-30s] %5.1f%% %.1f MB/s", filepath.Base(path), strings.Repeat("=", int(frac*30)), 100*frac, rate)
	}
	err = c.Download(ctx, url, sha, tmp, bar)
	fmt.Fprintln(os.Stderr)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// orShow prints v as JSON unless err.
func orShow[T any](v T, err error) error {
	if err != nil {
		return err
	}
	return show(v)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
