package servebench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// maxCDFPoints bounds the points drawn per CDF line.
const maxCDFPoints = 800

// WritePNG draws a run as a PNG: the top row has the cumulative
// distributions of TTFT and end-to-end latency (one line per workload label
// plus all requests) and of inter-token gaps; the bottom row has TTFT
// p50/p90/p99 per label, each label's mean prompt split into cached and
// computed tokens, and kvserve's server-side timings when present.
func WritePNG(w io.Writer, res *Result) error {
	const rows, cols = 2, 3
	rep := &res.Report
	labels := make([]string, 0, len(rep.ByLabel))
	for _, l := range rep.ByLabel {
		labels = append(labels, l.Label)
	}
	ok := make([]Record, 0, len(res.Records))
	for _, r := range res.Records {
		if r.Err == "" {
			ok = append(ok, r)
		}
	}
	plots := [][]*plot.Plot{
		{
			latencyCDF("Time to first token", labels, ok, func(r *Record) []float64 {
				if r.OutputChunks == 0 {
					return nil
				}
				return []float64{ms(r.TTFT)}
			}),
			latencyCDF("Inter-token latency", nil, ok, func(r *Record) []float64 {
				out := make([]float64, len(r.ITLs))
				for i, d := range r.ITLs {
					out[i] = ms(d)
				}
				return out
			}),
			latencyCDF("End-to-end latency", labels, ok, func(r *Record) []float64 { return []float64{ms(r.E2E)} }),
		},
		{ttftBars(rep), promptBars(rep), serverBars(rep)},
	}
	title := fmt.Sprintf("kvserve bench serve · %s · %s · %d ok / %d failed · %.1f out tok/s · cache hit %s",
		rep.Workload, modeString(rep), rep.Succeeded, rep.Failed, rep.OutputTokensPerS, pct(rep.CacheHitRate))

	width, height := vg.Points(1500), vg.Points(900)
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(96), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	head := plot.New()
	head.Title.Text = title
	head.Title.TextStyle.Font.Size = vg.Points(16)
	head.HideAxes()
	top := vg.Points(34)
	head.Draw(draw.Crop(dc, 0, 0, height-top, 0))
	body := draw.Crop(dc, 0, 0, 0, -top)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(24), PadY: vg.Points(24),
		PadTop: vg.Points(8), PadBottom: vg.Points(8), PadLeft: vg.Points(8), PadRight: vg.Points(16)}
	canvases := plot.Align(plots, tiles, body)
	for j := range rows {
		for i := range cols {
			plots[j][i].Draw(canvases[j][i])
		}
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		return fmt.Errorf("servebench: write png: %w", err)
	}
	return nil
}

func modeString(rep *Report) string {
	if rep.Rate > 0 {
		return fmt.Sprintf("%.3g sessions/s", rep.Rate)
	}
	return fmt.Sprintf("concurrency %d", rep.Concurrency)
}

// cdfXYs returns the empirical CDF of values (sorted in place) as at most
// maxCDFPoints points, with x clamped to floor for log axes.
func cdfXYs(values []float64, floor float64) plotter.XYs {
	slices.Sort(values)
	n := len(values)
	step := max(1, n/maxCDFPoints)
	var xy plotter.XYs
	for i := 0; i < n; i += step {
		xy = append(xy, plotter.XY{X: max(values[i], floor), Y: float64(i+1) / float64(n)})
	}
	if last := n - 1; last%step != 0 {
		xy = append(xy, plotter.XY{X: max(values[last], floor), Y: 1})
	}
	return xy
}

// latencyCDF plots the CDF of a per-record metric for all records and, when
// there is more than one label, for each label. The x axis is logarithmic
// when the values span more than a factor of 20.
func latencyCDF(title string, labels []string, recs []Record, metric func(*Record) []float64) *plot.Plot {
	p := newPlot(title, "ms", "fraction of requests ≤ x")
	if title == "Inter-token latency" {
		p.Y.Label.Text = "fraction of gaps ≤ x"
	}
	p.Y.Min, p.Y.Max = 0, 1
	byLabel := map[string][]float64{}
	var all []float64
	for i := range recs {
		v := metric(&recs[i])
		all = append(all, v...)
		byLabel[recs[i].Label] = append(byLabel[recs[i].Label], v...)
	}
	if len(all) == 0 {
		p.Title.Text += " (no data)"
		return p
	}
	lo, hi := slices.Min(all), slices.Max(all)
	floor := 0.0
	if lo <= 0 || hi/lo > 20 {
		floor = max(hi/1e5, 0.001)
		if hi/floor > 20 {
			p.X.Scale = plot.LogScale{}
			p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		}
	}
	series := []string{"all"}
	if len(labels) > 1 {
		series = append(series, labels...)
	}
	for k, name := range series {
		v := all
		if k > 0 {
			v = byLabel[name]
		}
		if len(v) == 0 {
			continue
		}
		line, err := plotter.NewLine(cdfXYs(slices.Clone(v), floor))
		if err != nil {
			continue
		}
		line.Color = plotutil.Color(k)
		line.Width = vg.Points(1.5)
		if k == 0 && len(series) > 1 {
			line.Color = color.Gray{Y: 40}
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("%s (%d)", name, len(v)), line)
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.YOffs = vg.Points(18)
	return p
}

// plainTicks are gonum's default ticks labelled with the shortest
// representation of their values ("7500", not "7500.00").
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'g', -1, 64)
		}
	}
	return ts
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.X.Tick.Marker, p.Y.Tick.Marker = plainTicks{}, plainTicks{}
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.X.Label.Text, p.Y.Label.Text = x, y
	return p
}

// groupedBars adds one bar series per entry of names, values[k][i] being
// series k at category i.
func groupedBars(p *plot.Plot, categories, names []string, values [][]float64) {
	n := len(names)
	top := 0.0
	for _, vs := range values {
		for _, v := range vs {
			if !math.IsNaN(v) {
				top = max(top, v)
			}
		}
	}
	headroom(p, top)
	w := vg.Points(float64(min(90/max(n, 1), 28)))
	for k, name := range names {
		vals := make(plotter.Values, len(categories))
		copy(vals, values[k])
		for i := range vals {
			if math.IsNaN(vals[i]) {
				vals[i] = 0
			}
		}
		bc, err := plotter.NewBarChart(vals, w)
		if err != nil {
			continue
		}
		bc.Color = plotutil.Color(k)
		bc.LineStyle.Width = 0
		bc.Offset = vg.Length(float64(k)-float64(n-1)/2) * w
		p.Add(bc)
		p.Legend.Add(name, bc)
	}
	p.NominalX(categories...)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
}

// headroom leaves space above the tallest bar for the legend.
func headroom(p *plot.Plot, top float64) {
	if top > 0 {
		p.Y.Min, p.Y.Max = 0, top*1.3
	}
}

func ttftBars(rep *Report) *plot.Plot {
	p := newPlot("TTFT percentiles by label", "", "ms")
	var cats []string
	vals := make([][]float64, 3)
	for _, l := range rep.ByLabel {
		if l.TTFT.Count == 0 {
			continue
		}
		cats = append(cats, l.Label)
		vals[0] = append(vals[0], l.TTFT.P50)
		vals[1] = append(vals[1], l.TTFT.P90)
		vals[2] = append(vals[2], l.TTFT.P99)
	}
	if len(cats) == 0 {
		p.Title.Text += " (no data)"
		return p
	}
	groupedBars(p, cats, []string{"p50", "p90", "p99"}, vals)
	return p
}

func promptBars(rep *Report) *plot.Plot {
	p := newPlot("Mean prompt tokens: cached vs computed", "", "tokens per request")
	var cats []string
	var cached, computed plotter.Values
	for _, l := range rep.ByLabel {
		cats = append(cats, l.Label)
		hit := 0.0
		if l.CacheHitRate != nil {
			hit = *l.CacheHitRate
		}
		cached = append(cached, l.PromptTokensPerRequest*hit)
		computed = append(computed, l.PromptTokensPerRequest*(1-hit))
	}
	if len(cats) == 0 || rep.PromptTokens == 0 {
		p.Title.Text += " (no usage)"
		return p
	}
	tallest := 0.0
	for i := range cached {
		tallest = max(tallest, cached[i]+computed[i])
	}
	headroom(p, tallest)
	w := vg.Points(40)
	bc, err := plotter.NewBarChart(cached, w)
	if err != nil {
		return p
	}
	bc.Color = plotutil.Color(2)
	bc.LineStyle.Width = 0
	top, err := plotter.NewBarChart(computed, w)
	if err != nil {
		return p
	}
	top.Color = plotutil.Color(0)
	top.LineStyle.Width = 0
	top.StackOn(bc)
	p.Add(bc, top, plotter.NewGrid())
	p.Legend.Add("cached", bc)
	p.Legend.Add("computed", top)
	p.Legend.Top, p.Legend.Left = true, true
	p.NominalX(cats...)
	return p
}

func serverBars(rep *Report) *plot.Plot {
	s := rep.Server
	if s == nil {
		p := newPlot("Server-side timings (not reported)", "", "ms")
		return p
	}
	p := newPlot(fmt.Sprintf("Server-side timings (%d responses) vs client TTFT", s.Count), "", "ms")
	var cats []string
	vals := make([][]float64, 3)
	for i, d := range []Dist{s.Queue, s.Overhead, s.TTFT, rep.TTFT} {
		if d.Count == 0 {
			continue
		}
		cats = append(cats, []string{"queue", "overhead", "server TTFT", "client TTFT"}[i])
		vals[0] = append(vals[0], d.P50)
		vals[1] = append(vals[1], d.P90)
		vals[2] = append(vals[2], d.P99)
	}
	groupedBars(p, cats, []string{"p50", "p90", "p99"}, vals)
	return p
}
