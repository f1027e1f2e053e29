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
	fs.StringVar(&u.url, "url", client.EnvURL(), "the service (env WTS_URL)")
	fs.StringVar(&u.key, "key", os.Getenv("WTS_API_KEY"), "an API key (env WTS_API_KEY)")
	fs.BoolVar(&u.json, "json", false, "print the service's JSON instead of a table")
}

// user is a user command: it parses the command's flags (its own added by
// extra) and its nArgs positional arguments (named by argNames, for the
// help), then calls do with a client and a context that ends on Ctrl-C.
func user(name, argNames string, nArgs int, extra func(*flag.FlagSet), do func(ctx context.Context, u *userFlags, c *client.Client, args []string) error) func([]string) error {
	return func(args []string) error {
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
				return err
			}
			if fs.NArg() == 0 {
				break
			}
			pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
		}
		if len(pos) != nArgs {
			fs.Usage()
			return fmt.Errorf("%s: want %s", name, strings.TrimSpace(argNames+" (nothing else)"))
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		return do(ctx, &u, client.New(u.url, u.key), pos)
	}
}

// show prints v as indented JSON.
func show(v any) error {
	e := json.NewEncoder(os.Stdout)
	e.SetIndent("", "  ")
	return e.Encode(v)
}

// listed prints a listing: the service's JSON with --json, else a table
// of header and the rows row makes of each item.
func listed[T any](u *userFlags, items []T, err error, header string, row func(*T) []any) error {
	if err != nil {
		return err
	}
	if u.json {
		return show(items)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, header)
	for i := range items {
		for j, c := range row(&items[i]) {
			if j > 0 {
				fmt.Fprint(w, "\t")
			}
			fmt.Fprint(w, c)
		}
		fmt.Fprintln(w)
	}
	return w.Flush()
}

// limitFlag adds --limit to a listing.
func limitFlag(limit *int, def int) func(*flag.FlagSet) {
	return func(fs *flag.FlagSet) { fs.IntVar(limit, "limit", def, "how many (1-500)") }
}

func when(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05") }

func sessionsCmd(args []string) error {
	var limit int
	return sub("sessions", args, []command{
		{"list", "", "the caller's sessions, newest first", user("sessions list", "", 0, limitFlag(&limit, 20), func(ctx context.Context, u *userFlags, c *client.Client, _ []string) error {
			p, err := c.ListSessions(ctx, "", limit)
			return listed(u, p.Items, err, "ID\tSTATUS\tPROVIDER\tRUN\tCREATED", func(s *client.Session) []any {
				return []any{s.ID, s.Status, s.Provider, s.RunID, when(s.CreatedAt)}
			})
		})},
		{"show", "SESSION_ID", "a session", user("sessions show", "SESSION_ID", 1, nil, func(ctx context.Context, _ *userFlags, c *client.Client, a []string) error {
			return orShow(c.GetSession(ctx, a[0]))
		})},
		{"close", "SESSION_ID", "close a session (its run is cancelled if it has not ended)", user("sessions close", "SESSION_ID", 1, nil, func(ctx context.Context, _ *userFlags, c *client.Client, a []string) error {
			return orShow(c.CloseSession(ctx, a[0]))
		})},
	})
}

func runsCmd(args []string) error {
	var limit int
	return sub("runs", args, []command{
		{"list", "", "the caller's runs, newest first", user("runs list", "", 0, limitFlag(&limit, 20), func(ctx context.Context, u *userFlags, c *client.Client, _ []string) error {
			p, err := c.ListRuns(ctx, "", limit)
			return listed(u, p.Items, err, "ID\tSTATUS\tMODEL\tRANK\tOPS\tWEIGHTS\tCREATED", func(r *client.Run) []any {
				return []any{r.ID, r.Status, r.BaseModel, r.LoRA.Rank, r.NextSeqID - 1, r.LatestWeightVersion, when(r.CreatedAt)}
			})
		})},
		{"show", "RUN_ID", "a run, with its metrics' summary", user("runs show", "RUN_ID", 1, nil, func(ctx context.Context, _ *userFlags, c *client.Client, a []string) error {
			r, err := c.GetRun(ctx, a[0])
			if err != nil {
				return err
			}
			m, err := c.Metrics(ctx, a[0], 0, 1)
			if err != nil {
				return err
			}
			return show(map[string]any{"run": r, "metrics_summary": m.Summary})
		})},
		{"finish", "RUN_ID", "finish a run once its queued operations are done, and wait for it", user("runs finish", "RUN_ID", 1, nil, func(ctx context.Context, _ *userFlags, c *client.Client, a []string) error {
			op, err := c.FinishRun(ctx, a[0])
			if err != nil {
				return err
			}
			return wait(ctx, c, op)
		})},
	})
}

func opsCmd(args []string) error {
	var after int64
	var limit int
	return sub("ops", args, []command{
		{"list", "RUN_ID", "a run's operations in seq_id order", user("ops list", "RUN_ID", 1, func(fs *flag.FlagSet) {
			fs.Int64Var(&after, "after", 0, "list from after this seq_id")
			limitFlag(&limit, 100)(fs)
		}, func(ctx context.Context, u *userFlags, c *client.Client, a []string) error {
			p, err := c.ListOperations(ctx, a[0], after, limit)
			return listed(u, p.Items, err, "SEQ\tID\tKIND\tSTATUS\tTOOK\tERROR", func(op *client.Operation) []any {
				return []any{op.SeqID, op.ID, op.Kind, op.Status, op.UpdatedAt.Sub(op.CreatedAt).Round(time.Millisecond), deref(op.ErrorCode)}
			})
		})},
		{"show", "OPERATION_ID", "an operation", user("ops show", "OPERATION_ID", 1, nil, func(ctx context.Context, _ *userFlags, c *client.Client, a []string) error {
			return orShow(c.GetOperation(ctx, a[0]))
		})},
		{"wait", "OPERATION_ID", "wait for an operation to end, showing its progress", user("ops wait", "OPERATION_ID", 1, nil, func(ctx context.Context, _ *userFlags, c *client.Client, a []string) error {
			op, err := c.GetOperation(ctx, a[0])
			if err != nil {
				return err
			}
			return wait(ctx, c, op)
		})},
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

var checkpointsCmd = user("checkpoints", "RUN_ID", 1, nil, func(ctx context.Context, u *userFlags, c *client.Client, a []string) error {
	p, err := c.ListCheckpoints(ctx, a[0], 0, 500)
	return listed(u, p.Items, err, "ID\tNAME\tSTEP\tBYTES\tSTATUS\tCREATED", func(cp *client.Checkpoint) []any {
		return []any{cp.ID, cp.Name, cp.Step, cp.SizeBytes, cp.Status, when(cp.CreatedAt)}
	})
})

var artifactsCmd = user("artifacts", "RUN_ID", 1, nil, func(ctx context.Context, u *userFlags, c *client.Client, a []string) error {
	p, err := c.ListArtifacts(ctx, a[0], 0, 500)
	return listed(u, p.Items, err, "ID\tKIND\tBYTES\tFILES\tSTATUS\tCREATED", func(ar *client.Artifact) []any {
		return []any{ar.ID, ar.Kind, ar.SizeBytes, len(ar.Files), ar.Status, when(ar.CreatedAt)}
	})
})

var exportsCmd = user("exports", "EXPORT_ID", 1, nil, func(ctx context.Context, _ *userFlags, c *client.Client, a []string) error {
	return orShow(c.GetExport(ctx, a[0]))
})

var modelsCmd = user("models", "", 0, nil, func(ctx context.Context, u *userFlags, c *client.Client, _ []string) error {
	ms, err := c.Models(ctx)
	return listed(u, ms, err, "NAME\tREVISION\tARCH\tPARAMS\tMAX_SEQ\tTOKENIZER\tPROVIDERS", func(m *client.Model) []any {
		return []any{m.Name, m.Revision, m.Architecture, m.Parameters, m.MaxSeqLen, m.Tokenizer, strings.Join(m.Providers, ",")}
	})
})

// downloadCmd fetches an artifact's files through signed links, with a
// progress bar, and checks each file's SHA-256.
func downloadCmd(args []string) error {
	var format, out string
	return user("download", "ARTIFACT_ID", 1, func(fs *flag.FlagSet) {
		fs.StringVar(&format, "format", "peft", "peft (the adapter) or merged (the base with the adapter folded in)")
		fs.StringVar(&out, "out", "", "the folder to write (default: ./ARTIFACT_ID)")
	}, func(ctx context.Context, _ *userFlags, c *client.Client, a []string) error {
		links, err := c.DownloadLinks(ctx, a[0], format)
		if err != nil {
			return err
		}
		if out == "" {
			out = a[0]
		}
		for _, f := range links.Files {
			if !filepath.IsLocal(filepath.FromSlash(f.Path)) {
				return fmt.Errorf("the service named a file outside the folder: %q", f.Path)
			}
			path := filepath.Join(out, filepath.FromSlash(f.Path))
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			if err := fetch(ctx, c, f.URL, f.SHA256, f.SizeBytes, path); err != nil {
				return fmt.Errorf("%s: %w", f.Path, err)
			}
		}
		fmt.Println(out)
		return nil
	})(args)
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
