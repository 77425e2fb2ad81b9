/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Aligned text columns for vgpuctl's human output. */
#include "ctl.h"

/* Control characters could move the cursor or recolour the terminal: they become "?". */
static char *sanitize(const char *s)
{
        char *copy = strdup(s);
        if (!copy)
                return NULL;
        for (char *p = copy; *p; p++)
                if ((unsigned char)*p < ' ' || *p == 0x7f)
                        *p = '?';
        return copy;
}

void ctl_print_sanitized(FILE *out, const char *s)
{
        for (const char *p = s; *p; p++)
                fputc((unsigned char)*p < ' ' || *p == 0x7f ? '?' : *p, out);
}

/* Characters on screen, roughly: UTF-8 continuation bytes take no column of their own. */
static size_t display_width(const char *s)
{
        size_t n = 0;
        for (const char *p = s; *p; p++)
                if (((unsigned char)*p & 0xc0) != 0x80)
                        n++;
        return n;
}

int ctl_table_init(CtlTable *t, size_t n_columns)
{
        if (n_columns == 0)
                return -EINVAL;
        *t = (CtlTable){.n_columns = n_columns};
        return 0;
}

void ctl_table_done(CtlTable *t)
{
        for (size_t i = 0; i < t->n_cells; i++)
                free(t->cells[i]);
        free(t->cells);
        *t = (CtlTable){};
}

int ctl_table_add_row(CtlTable *t, const char *const *row)
{
        char **cells = reallocarray(t->cells, t->n_cells + t->n_columns, sizeof(char *));
        if (!cells)
                return -ENOMEM;
        t->cells = cells;

        for (size_t i = 0; i < t->n_columns; i++) {
                char *cell = sanitize(row[i] ? row[i] : "-");
                if (!cell)
                        return -ENOMEM;
                t->cells[t->n_cells++] = cell;
        }
        return 0;
}

int ctl_table_print(const CtlTable *t, FILE *out, const char *indent)
{
        size_t n_rows = t->n_cells / t->n_columns;
        _cleanup_free_ size_t *widths = calloc(t->n_columns, sizeof(size_t));
        if (!widths)
                return -ENOMEM;

        for (size_t i = 0; i < t->n_cells; i++) {
                size_t w = display_width(t->cells[i]);
                if (w > widths[i % t->n_columns])
                        widths[i % t->n_columns] = w;
        }

        for (size_t row = 0; row < n_rows; row++) {
                fputs(indent, out);
                for (size_t col = 0; col < t->n_columns; col++) {
                        const char *cell = t->cells[row * t->n_columns + col];
                        fputs(cell, out);
                        if (col + 1 == t->n_columns)
                                break;
                        for (size_t pad = display_width(cell); pad < widths[col] + 2; pad++)
                                fputc(' ', out);
                }
                fputc('\n', out);
        }
        return 0;
}
