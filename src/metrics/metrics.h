/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * metrics: a writer of the Prometheus text exposition format, version 0.0.4 (SPEC MET-1).
 *
 * The caller starts each family with metrics_family() and adds its samples; the writer renders
 * text that `promtool check metrics` accepts.
 *
 * Promises:
 *  - one "# HELP" and one "# TYPE" line per family: a second family with a name already used
 *    is refused (-EEXIST), so a family's samples are always contiguous;
 *  - metric and label names follow the format's grammar (-EINVAL otherwise); label names
 *    starting with "__" are reserved and refused; counter names end in "_total";
 *  - label values are escaped (\\, \", \n) and must be valid UTF-8 (-EINVAL otherwise); help
 *    texts are escaped (\\, \n);
 *  - within a family each label set appears once (-EEXIST for a repeat);
 *  - errors are sticky: the first failure is kept, every later call returns it without writing,
 *    and metrics_writer_finish() reports it. Callers may therefore write a whole exposition and
 *    check once, at the end. A failed exposition is never half-served.
 */

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* The Content-Type of an exposition, exactly (MET-1). */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef enum MetricType {
        METRIC_COUNTER,
        METRIC_GAUGE,
} MetricType;

typedef struct MetricsWriter MetricsWriter;

int metrics_writer_new(MetricsWriter **ret);
MetricsWriter *metrics_writer_free(MetricsWriter *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(MetricsWriter *, metrics_writer_free);
#define _cleanup_metrics_writer_ _cleanup_(metrics_writer_freep)

/* Starts a family: writes its HELP and TYPE lines. help must not be empty. */
int metrics_family(MetricsWriter *w, const char *name, MetricType type, const char *help);

/*
 * Adds a sample to the current family. The labels follow the value as (const char *name,
 * const char *value) pairs and end with NULL; a sample without labels passes only NULL.
 * A sample before any family is -EINVAL.
 */
int metrics_sample_u64(MetricsWriter *w, uint64_t value, ...) _sentinel_;
int metrics_sample_double(MetricsWriter *w, double value, ...) _sentinel_;

/*
 * Ends the exposition: on success hands over the text (NUL-terminated; ret_size, if non-NULL,
 * gets its length) and leaves the writer empty; on failure returns the first error recorded.
 */
int metrics_writer_finish(MetricsWriter *w, char **ret, size_t *ret_size);
