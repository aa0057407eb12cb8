/* svgplot: a hand-written SVG line chart (axes with round ticks, axis
 * labels, a title, a legend) of a few series of (x, y) points, for the
 * kvpool tool's reports (replay --sweep --plot). No state; any thread.
 */
#ifndef KVP_SVGPLOT_H
#define KVP_SVGPLOT_H

#include <stddef.h>
#include <stdio.h>

#define SVGPLOT_LINE    1u	/* join the points */
#define SVGPLOT_MARKERS 2u	/* a dot at each point */
#define SVGPLOT_DASHED  4u	/* with LINE: dashed */

struct svgplot_series {
	const char *label;		/* in the legend */
	const char *color;		/* any SVG colour, e.g. "#1f77b4" */
	const double *x, *y;
	size_t n;
	unsigned style;			/* SVGPLOT_* */
};

struct svgplot {
	const char *title, *xlabel, *ylabel;
	/* Axis ranges; max <= min: from the data (from 0, to a round number). */
	double xmin, xmax, ymin, ymax;
	const struct svgplot_series *series;
	size_t nseries;
};

/* Writes the chart as a standalone SVG document. 0 or -EIO. */
int svgplot_write(const struct svgplot *p, FILE *out);
/* The same into path, atomically (a temporary file, then rename): 0 or
 * -errno. */
int svgplot_write_file(const struct svgplot *p, const char *path);

#endif
