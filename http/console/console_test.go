package console_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/wts-project/wts/bench/service"
	"github.com/wts-project/wts/http/client"
)

// browser is a headless Chromium (Debian's), or the test is skipped where
// there is none; CI installs it, and fails without it.
func browser(t *testing.T) (context.Context, context.CancelFunc) {
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is needed (.ci/run installs it)")
		}
		t.Skip("no chromium here")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true), chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1600))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTime := context.WithTimeout(ctx, 2*time.Minute)
	return ctx, func() { cancelTime(); cancelCtx(); cancelAlloc() }
}

// The console, in a real browser: sign in with a key, open a run that is
// training, see its loss curve with the run's points, and see it grow as
// the run takes another step. A screenshot of the run page is kept in the
// test's artifact folder (go test -artifacts).
func TestConsoleInBrowser(t *testing.T) {
	ctx, cancel := browser(t)
	defer cancel()
	dir := t.TempDir()
	wts := filepath.Join(dir, "wts")
	if out, err := exec.Command("go", "build", "-o", wts, "../../cmd/wts").CombinedOutput(); err != nil {
		t.Fatalf("build wts: %v\n%s", err, out)
	}
	srv := service.Serve(wts, filepath.Join(dir, "data"), "tiny")
	defer srv.Stop()
	c := client.New("http://"+srv.Addr, srv.Key)
	sess, err := c.CreateSession(ctx, client.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := c.CreateLoRATrainingClient(ctx, sess.ID, client.TrainingOptions{BaseModel: srv.Model, LoRA: client.LoRA{Rank: 4}})
	if err != nil {
		t.Fatal(err)
	}
	data := []client.Datum{client.NextTokenDatum([]int{1, 5, 9, 13, 17, 21}, nil)}
	step := func() {
		t.Helper()
		fb, err := tc.ForwardBackward(ctx, data, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		opt, err := tc.OptimStep(ctx, client.AdamParams{LearningRate: 1e-2})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := opt.Result(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := fb.Result(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		step()
	}
	ex, err := tc.ExportLoRA(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ex.Result(ctx); err != nil {
		t.Fatal(err)
	}

	const loss = `svg.chart[data-metric="loss:mean"]`
	run := fmt.Sprintf(`a[href="#/runs/%s"]`, tc.Run.ID)
	if err := chromedp.Do(ctx); err != nil { // starts the browser, on the test's context
		t.Fatal(err)
	}
	for i, a := range []chromedp.Action[chromedp.Void]{chromedp.Navigate("http://" + srv.Addr + "/console"),
		chromedp.WaitVisible(`#key`),
		chromedp.SendKeys(`#key`, srv.Key),
		chromedp.Click(`#signin button[type=submit]`),
		chromedp.WaitVisible(run),
		chromedp.Click(run),
		chromedp.WaitVisible(loss)} {
		c2, cc := context.WithTimeout(ctx, 10*time.Second)
		err := chromedp.Do(c2, a)
		cc()
		if err != nil {
			h, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerHTML`))
			t.Fatalf("step %d of signing in and opening the run: %v\nthe page:\n%s", i, err, h)
		}
	}
	points := func() string {
		t.Helper()
		a, err := chromedp.Run(ctx, chromedp.AttributeValue(loss, "data-points"))
		if err != nil {
			t.Fatal(err)
		}
		return a.Value
	}
	dots, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('`+loss+` circle.dot').length`))
	if err != nil {
		t.Fatal(err)
	}
	if p := points(); p != "4" || dots != 4 {
		t.Fatalf("the loss curve has %s points (%d drawn), want the run's 4", p, dots)
	}
	// The run trains on: the open page shows the new step by itself.
	step()
	deadline := time.Now().Add(30 * time.Second)
	for p := points(); p != "5"; p = points() {
		if time.Now().After(deadline) {
			t.Fatalf("the loss curve still has %s points after the run's fifth step", p)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A drag across the first half of the curve zooms into those steps; a
	// double-click shows them all again.
	box, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(() => { const r = document.querySelector('`+loss+`').getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()`))
	if err != nil || len(box) != 4 {
		t.Fatalf("the chart's box: %v %v", box, err)
	}
	y, left, mid := box[1]+box[3]/2, box[0]+box[2]*0.05, box[0]+box[2]*0.5
	drawn := func() int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('`+loss+` circle.dot').length`))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	err = chromedp.Do(ctx,
		chromedp.MouseEvent(chromedp.MousePressed, left, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseMoved, mid, y, chromedp.ButtonLeft),
		chromedp.MouseEvent(chromedp.MouseReleased, mid, y, chromedp.ButtonLeft))
	if err != nil {
		t.Fatal(err)
	}
	if n := drawn(); n < 1 || n >= 5 {
		t.Errorf("after zooming into the first half, %d of 5 points drawn", n)
	}
	if err := chromedp.Do(ctx, chromedp.DoubleClick(loss)); err != nil {
		t.Fatal(err)
	}
	if n := drawn(); n != 5 {
		t.Errorf("after a double-click, %d of 5 points drawn", n)
	}
	// The operations, the artifact and the other curves are on the page too.
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('h2 + table tbody tr').length`))
	if err != nil {
		t.Fatal(err)
	}
	if rows < 11 {
		t.Errorf("%d table rows, want at least the run's 11 operations", rows)
	}
	text, err := chromedp.Run(ctx, chromedp.Text(`#view`))
	if err != nil {
		t.Fatal(err)
	}
	art, _ := ex.Result(ctx)
	for _, want := range []string{tc.Run.ID, "export_lora", "grad_norm", "learning_rate", art.ArtifactID, "download links"} {
		if !strings.Contains(text, want) {
			t.Errorf("the run page does not show %q", want)
		}
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(t.ArtifactDir(), "console-run.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
}
