/* svgplot: SVG line charts; see svgplot.h. Coordinates are written with
 * one decimal; text is XML-escaped. */
#include "svgplot.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define W 760
#define H 480
#define ML 78		/* margins: left, right, top, bottom */
#define MR 24
#define MT 44
#define MB 62

static void sp_text(FILE *out, const char *s)
{
	for (; s && *s; s++) {
		switch (*s) {
		case '&': fputs("&amp;", out); break;
		case '<': fputs("&lt;", out); break;
		case '>': fputs("&gt;", out); break;
		case '"': fputs("&quot;", out); break;
		default:
			if ((unsigned char)*s >= 0x20 || *s == '\t')
				fputc(*s, out);
		}
	}
}

/* A round tick step: 1, 2 or 5 times a power of ten, about range / 5. */
static double sp_step(double range)
{
	double raw = range / 5, mag, f;

	if (!(raw > 0))
		return 1;
	mag = pow(10, floor(log10(raw)));
	f = raw / mag;
	return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
}

/* The range: as given, or from the data, starting at 0 and ending at a
 * round number. */
static void sp_range(const struct svgplot *p, int axis, double *lo, double *hi)
{
	double mn = axis ? p->ymin : p->xmin, mx = axis ? p->ymax : p->xmax, top = 0, step;

	if (mx > mn) {
		*lo = mn;
		*hi = mx;
		return;
	}
	for (size_t s = 0; s < p->nseries; s++)
		for (size_t i = 0; i < p->series[s].n; i++) {
			double v = axis ? p->series[s].y[i] : p->series[s].x[i];

			if (isfinite(v) && v > top)
				top = v;
		}
	if (!(top > 0))
		top = 1;
	step = sp_step(top);
	*lo = 0;
	*hi = ceil(top / step * 1.0000001) * step;
	if (*hi < top * 1.04)
		*hi += step / 2;
}

/* Tick labels without trailing zeros; thousands as 1.5k etc. are not
 * needed for the sizes plotted here. */
static void sp_num(char *buf, size_t len, double v, double step)
{
	int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);

	if (dec > 6)
		dec = 6;
	snprintf(buf, len, "%.*f", dec, v);
}

int svgplot_write(const struct svgplot *p, FILE *out)
{
	double x0, x1, y0, y1, xs, ys;
	const double pw = W - ML - MR, ph = H - MT - MB;
	char num[64];

	sp_range(p, 0, &x0, &x1);
	sp_range(p, 1, &y0, &y1);
#define PX(v) (ML + ((v) - x0) / (x1 - x0) * pw)
#define PY(v) (MT + ph - ((v) - y0) / (y1 - y0) * ph)
	fprintf(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		"viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H, W, H);
	fprintf(out, "<text x=\"%d\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">", W / 2);
	sp_text(out, p->title);
	fputs("</text>\n", out);

	/* grid, ticks and tick labels */
	xs = sp_step(x1 - x0);
	ys = sp_step(y1 - y0);
	fputs("<g stroke=\"#e4e4e4\" stroke-width=\"1\">\n", out);
	for (double v = ceil(x0 / xs) * xs; v <= x1 + xs * 1e-9; v += xs)
		fprintf(out, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\"/>\n", PX(v), MT, PX(v),
			MT + ph);
	for (double v = ceil(y0 / ys) * ys; v <= y1 + ys * 1e-9; v += ys)
		fprintf(out, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", ML, PY(v),
			ML + pw, PY(v));
	fputs("</g>\n<g fill=\"#333\">\n", out);
	for (double v = ceil(x0 / xs) * xs; v <= x1 + xs * 1e-9; v += xs) {
		sp_num(num, sizeof(num), v, xs);
		fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", PX(v),
			MT + ph + 18, num);
	}
	for (double v = ceil(y0 / ys) * ys; v <= y1 + ys * 1e-9; v += ys) {
		sp_num(num, sizeof(num), v, ys);
		fprintf(out, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", ML - 8,
			PY(v) + 4, num);
	}
	fputs("</g>\n", out);
	fprintf(out, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
		"stroke=\"#333\"/>\n", ML, MT, pw, ph);
	fprintf(out, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", ML + pw / 2, H - 18);
	sp_text(out, p->xlabel);
	fprintf(out, "</text>\n<text transform=\"translate(20 %.1f) rotate(-90)\" "
		"text-anchor=\"middle\">", MT + ph / 2);
	sp_text(out, p->ylabel);
	fputs("</text>\n", out);

	/* the series, clipped to the plot area */
	fprintf(out, "<clipPath id=\"area\"><rect x=\"%d\" y=\"%d\" width=\"%.1f\" "
		"height=\"%.1f\"/></clipPath>\n<g clip-path=\"url(#area)\" fill=\"none\">\n",
		ML - 4, MT - 4, pw + 8, ph + 8);
	for (size_t s = 0; s < p->nseries; s++) {
		const struct svgplot_series *se = &p->series[s];
		bool first = true;

		if (se->style & SVGPLOT_LINE) {
			fprintf(out, "<polyline stroke=\"%s\" stroke-width=\"2\"%s points=\"", se->color,
				se->style & SVGPLOT_DASHED ? " stroke-dasharray=\"6 4\"" : "");
			for (size_t i = 0; i < se->n; i++) {
				if (!isfinite(se->x[i]) || !isfinite(se->y[i]))
					continue;
				fprintf(out, "%s%.1f,%.1f", first ? "" : " ", PX(se->x[i]), PY(se->y[i]));
				first = false;
			}
			fputs("\"/>\n", out);
		}
		if (se->style & SVGPLOT_MARKERS)
			for (size_t i = 0; i < se->n; i++)
				if (isfinite(se->x[i]) && isfinite(se->y[i]))
					fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"/>\n",
						PX(se->x[i]), PY(se->y[i]), se->color);
	}
	fputs("</g>\n", out);

	/* the legend, bottom right inside the plot: rising curves leave it free */
	int lx = ML + (int)pw - 240, ly = MT + (int)ph - 20 - 18 * (int)p->nseries;

	fprintf(out, "<g><rect x=\"%d\" y=\"%d\" width=\"230\" height=\"%zu\" fill=\"white\" "
		"fill-opacity=\"0.85\" stroke=\"#bbb\"/>\n", lx, ly, 10 + 18 * p->nseries);
	for (size_t s = 0; s < p->nseries; s++) {
		const struct svgplot_series *se = &p->series[s];
		int y = ly + 14 + 18 * (int)s;

		if (se->style & SVGPLOT_LINE)
			fprintf(out, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
				"stroke-width=\"2\"%s/>\n", lx + 8, y - 4, lx + 36, y - 4, se->color,
				se->style & SVGPLOT_DASHED ? " stroke-dasharray=\"6 4\"" : "");
		if (se->style & SVGPLOT_MARKERS)
			fprintf(out, "<circle cx=\"%d\" cy=\"%d\" r=\"4\" fill=\"%s\"/>\n", lx + 22, y - 4,
				se->color);
		fprintf(out, "<text x=\"%d\" y=\"%d\">", lx + 44, y);
		sp_text(out, se->label);
		fputs("</text>\n", out);
	}
	fputs("</g>\n</svg>\n", out);
#undef PX
#undef PY
	return ferror(out) ? -EIO : 0;
}

int svgplot_write_file(const struct svgplot *p, const char *path)
{
	char tmp[PATH_MAX];
	FILE *f;
	int fd, rc;

	if (snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = mkstemp(tmp);
	if (fd < 0)
		return -errno;
	f = fdopen(fd, "w");
	if (!f) {
		rc = -errno;
		close(fd);
		unlink(tmp);
		return rc;
	}
	rc = svgplot_write(p, f);
	if (fchmod(fd, 0644) < 0 && rc == 0)
		rc = -errno;
	if (fclose(f) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
	return rc;
}
