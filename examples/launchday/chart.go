package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// latencySeries are the endpoints drawn in the latency panels, with their
// line styles; the last is drawn on top.
var latencySeries = []struct {
	ep    Endpoint
	style draw.LineStyle
}{
	{Products, draw.LineStyle{Color: color.RGBA{R: 150, G: 150, B: 150, A: 255}, Width: vg.Points(1)}},
	{Cart, draw.LineStyle{Color: color.RGBA{R: 20, G: 150, B: 70, A: 255}, Width: vg.Points(1.5)}},
	{Home, draw.LineStyle{Color: color.RGBA{R: 30, G: 90, B: 200, A: 255}, Width: vg.Points(1.5)}},
	{Login, draw.LineStyle{Color: color.RGBA{R: 200, G: 30, B: 30, A: 255}, Width: vg.Points(2.5)}},
}

// outcomeStyles are the line styles of the outcome panels.
var outcomeStyles = [numOutcomes]draw.LineStyle{
	Succeeded: {Color: color.RGBA{R: 20, G: 150, B: 70, A: 255}, Width: vg.Points(2)},
	Limited:   {Color: color.RGBA{R: 30, G: 90, B: 200, A: 255}, Width: vg.Points(2)},
	TimedOut:  {Color: color.RGBA{R: 200, G: 30, B: 30, A: 255}, Width: vg.Points(2)},
	Failed:    {Color: color.RGBA{R: 230, G: 140, B: 0, A: 255}, Width: vg.Points(2)},
}

var (
	baselineStyle = draw.LineStyle{Color: color.RGBA{R: 200, G: 30, B: 30, A: 255}, Width: vg.Points(1),
		Dashes: []vg.Length{vg.Points(5), vg.Points(3)}}
	launchStyle = draw.LineStyle{Color: color.Gray{Y: 80}, Width: vg.Points(1),
		Dashes: []vg.Length{vg.Points(1), vg.Points(3)}}
	// The adaptive rule's learnt limit, and the store's slots it never
	// heard of.
	learntStyle = draw.LineStyle{Color: color.RGBA{R: 130, G: 40, B: 160, A: 255}, Width: vg.Points(2.5)}
	slotsStyle  = draw.LineStyle{Color: color.RGBA{R: 130, G: 40, B: 160, A: 255}, Width: vg.Points(1),
		Dashes: []vg.Length{vg.Points(5), vg.Points(3)}}
)

// WriteChart draws the runs side by side into a PNG at path. Each run gets a
// column: on top the p99 latency of the browsing endpoints per second, below
// the buy presses per second by outcome (a second with none of an outcome is a
// gap in its line); both by the second the requests were sent in. baseline, if not nil, adds its login p99 as a dashed line.
func WriteChart(path string, runs []*RunResult, baseline *RunResult) error {
	if len(runs) == 0 {
		return fmt.Errorf("chart: no runs")
	}
	var baselineLoginP99 time.Duration
	if baseline != nil {
		baselineLoginP99 = Summarize(baseline.Records)[Login].P99
	}

	// Shared axis ranges, so that the columns compare at a glance.
	var span time.Duration
	maxLatency := time.Second
	maxCount := 10
	var seen [numOutcomes]bool
	for _, r := range runs {
		span = max(span, r.Scenario.Duration)
		maxLatency = max(maxLatency, r.Scenario.Timeout)
		for _, s := range PerSecond(r.Records, Buy, r.Scenario.Duration) {
			for o, n := range s.Outcomes {
				maxCount = max(maxCount, n)
				seen[o] = seen[o] || n > 0
			}
		}
	}
	xMax := span.Seconds()
	latencyMax := 2 * float64(maxLatency) / 1e6 // milliseconds
	countMax := math.Pow(10, math.Ceil(math.Log10(float64(maxCount)*1.5)))

	plots := [][]*plot.Plot{make([]*plot.Plot, len(runs)), make([]*plot.Plot, len(runs)), make([]*plot.Plot, len(runs))}
	for i, r := range runs {
		top, err := latencyPlot(r, xMax, latencyMax, baselineLoginP99)
		if err != nil {
			return err
		}
		middle, err := outcomePlot(r, xMax, countMax)
		if err != nil {
			return err
		}
		bottom, err := slotsPlot(r, xMax)
		if err != nil {
			return err
		}
		plots[0][i], plots[1][i], plots[2][i] = top, middle, bottom
	}

	// One legend per row, in a column to the right of the plots.
	legends := []plot.Legend{plot.NewLegend(), plot.NewLegend(), slotsLegend(runs)}
	for i := len(latencySeries) - 1; i >= 0; i-- {
		s := latencySeries[i]
		legends[0].Add(s.ep.String()+" p99", styleThumb(s.style))
	}
	if baselineLoginP99 > 0 {
		legends[0].Add("POST /login p99 with no launch", styleThumb(baselineStyle))
		legends[0].Add("  ("+fmtLatency(baselineLoginP99)+" over the whole run)", styleThumb(draw.LineStyle{}))
	}
	for o := range numOutcomes {
		if seen[o] {
			legends[1].Add(outcomeLegend(o, runs[0].Scenario.Timeout), styleThumb(outcomeStyles[o]))
		}
	}
	for i := range legends {
		legends[i].Add("launch begins", styleThumb(launchStyle))
		legends[i].Top, legends[i].Left = true, true
		legends[i].TextStyle.Font.Size = vg.Points(11)
		legends[i].Padding = vg.Points(5)
	}

	const (
		titleHeight = vg.Length(40)
		legendWidth = vg.Length(230)
		panelWidth  = vg.Length(520)
	)
	width := panelWidth*vg.Length(len(runs)) + legendWidth
	height := vg.Length(1120)
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(96))
	dc := draw.New(img)
	title := draw.TextStyle{
		Color:   color.Black,
		Font:    font.From(plot.DefaultFont, 15),
		XAlign:  draw.XCenter,
		YAlign:  draw.YTop,
		Handler: plot.DefaultTextHandler,
	}
	sc := runs[0].Scenario
	dc.FillText(title, vg.Point{X: width / 2, Y: height - 10},
		fmt.Sprintf("Launch day: %s buyers press Buy within %s, %d times each; the store has %d worker slots",
			fmtCount(int64(sc.Buyers)), sc.FirstPressWithin, sc.PressesPerBuyer, runs[0].Store.Workers))

	body := draw.Crop(dc, 0, -legendWidth, 0, -titleHeight)
	tiles := draw.Tiles{Rows: 3, Cols: len(runs), PadX: 24, PadY: 28, PadTop: 4, PadBottom: 8, PadLeft: 8, PadRight: 8}
	canvases := plot.Align(plots, tiles, body)
	for row := range plots {
		for col := range plots[row] {
			plots[row][col].Draw(canvases[row][col])
		}
	}
	legendArea := draw.Crop(dc, width-legendWidth, 0, 0, -titleHeight)
	legendTiles := draw.Tiles{Rows: 3, Cols: 1, PadY: 28, PadTop: 40, PadBottom: 8, PadLeft: 6, PadRight: 6}
	for row := range legends {
		legends[row].Draw(legendTiles.At(legendArea, 0, row))
	}

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// styleThumb is a legend thumbnail: a short line in the given style (none for
// a zero style).
type styleThumb draw.LineStyle

// Thumbnail implements plot.Thumbnailer.
func (s styleThumb) Thumbnail(c *draw.Canvas) {
	if s.Width == 0 {
		return
	}
	y := c.Center().Y
	c.StrokeLine2(draw.LineStyle(s), c.Min.X, y, c.Max.X, y)
}

// stepLines returns step lines through per-second values: value i covers
// [i, i+1) seconds. Seconds for which ok is false are gaps: each run of
// consecutive ok seconds becomes its own line.
func stepLines(values []float64, ok func(i int) bool, style draw.LineStyle) ([]plot.Plotter, error) {
	var lines []plot.Plotter
	for i := 0; i < len(values); {
		if !ok(i) {
			i++
			continue
		}
		var xys plotter.XYs
		for ; i < len(values) && ok(i); i++ {
			xys = append(xys, plotter.XY{X: float64(i), Y: values[i]})
		}
		xys = append(xys, plotter.XY{X: float64(i), Y: values[i-1]}) // close the last step
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		l.StepStyle = plotter.PostStep
		l.LineStyle = style
		lines = append(lines, l)
	}
	return lines, nil
}

// latencyPlot draws the p99 latency per second of the browsing endpoints in
// run r.
func latencyPlot(r *RunResult, xMax, yMax float64, baselineLoginP99 time.Duration) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = r.title() + ": p99 latency of requests sent in each second"
	p.X.Label.Text = "seconds since start"
	p.Y.Label.Text = "ms (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())

	for _, s := range latencySeries {
		buckets := PerSecond(r.Records, s.ep, r.Scenario.Duration)
		ms := make([]float64, len(buckets))
		for i, b := range buckets {
			ms[i] = float64(b.P99) / 1e6
		}
		lines, err := stepLines(ms, func(i int) bool { return buckets[i].P99 > 0 }, s.style)
		if err != nil {
			return nil, err
		}
		p.Add(lines...)
	}
	if baselineLoginP99 > 0 {
		ms := float64(baselineLoginP99) / 1e6
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: ms}, {X: xMax, Y: ms}})
		if err != nil {
			return nil, err
		}
		l.LineStyle = baselineStyle
		p.Add(l)
	}
	if err := addLaunchMarker(p, r.Scenario, 1, yMax); err != nil {
		return nil, err
	}
	p.X.Min, p.X.Max = 0, xMax
	p.Y.Min, p.Y.Max = 1, yMax
	return p, nil
}

// outcomePlot draws the buy presses sent per second in run r, by outcome.
func outcomePlot(r *RunResult, xMax, yMax float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = r.title() + ": POST /buy presses sent in each second, by outcome"
	p.X.Label.Text = "seconds since start"
	p.Y.Label.Text = "requests (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())

	buckets := PerSecond(r.Records, Buy, r.Scenario.Duration)
	for o := range numOutcomes {
		counts := make([]float64, len(buckets))
		for i, b := range buckets {
			counts[i] = float64(b.Outcomes[o])
		}
		lines, err := stepLines(counts, func(i int) bool { return counts[i] > 0 }, outcomeStyles[o])
		if err != nil {
			return nil, err
		}
		p.Add(lines...)
	}
	if err := addLaunchMarker(p, r.Scenario, 1, yMax); err != nil {
		return nil, err
	}
	p.X.Min, p.X.Max = 0, xMax
	p.Y.Min, p.Y.Max = 1, yMax
	return p, nil
}

// outcomeLegend names an outcome in the chart's legend.
func outcomeLegend(o Outcome, timeout time.Duration) string {
	switch o {
	case Succeeded:
		return "order placed (2xx)"
	case Limited:
		return "429 from the rate limiter"
	case TimedOut:
		return "no answer within " + timeout.String()
	default:
		return "other failure (5xx, connection)"
	}
}

// addLaunchMarker draws a dotted vertical line where the launch begins.
func addLaunchMarker(p *plot.Plot, sc Scenario, yMin, yMax float64) error {
	if sc.Buyers <= 0 {
		return nil
	}
	x := sc.LaunchAt.Seconds()
	l, err := plotter.NewLine(plotter.XYs{{X: x, Y: yMin}, {X: x, Y: yMax}})
	if err != nil {
		return err
	}
	l.LineStyle = launchStyle
	p.Add(l)
	return nil
}
