/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Arrays of pointers sorted by a string key each item holds (base.h). */
#include "base.h"

bool sorted_find(void *const *items, size_t n, const char *key, SortedKeyFunc key_of,
                 size_t *ret_at)
{
        size_t lo = 0, hi = n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(key_of(items[mid]), key);
                if (c == 0) {
                        if (ret_at)
                                *ret_at = mid;
                        return true;
                }
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (ret_at)
                *ret_at = lo;
        return false;
}

void *sorted_get(void *const *items, size_t n, const char *key, SortedKeyFunc key_of)
{
        size_t at;
        return key && sorted_find(items, n, key, key_of, &at) ? items[at] : NULL;
}

int sorted_insert(void ***items, size_t *n, void *item, SortedKeyFunc key_of)
{
        size_t at;
        if (sorted_find(*items, *n, key_of(item), key_of, &at))
                return -EEXIST;
        void **grown = reallocarray(*items, *n + 1, sizeof *grown);
        if (!grown)
                return -ENOMEM;
        *items = grown;
        memmove(&grown[at + 1], &grown[at], (*n - at) * sizeof *grown);
        grown[at] = item;
        (*n)++;
        return 0;
}

bool sorted_remove(void **items, size_t *n, const void *item, SortedKeyFunc key_of)
{
        size_t at;
        if (!sorted_find(items, *n, key_of(item), key_of, &at) || items[at] != item)
                return false;
        memmove(&items[at], &items[at + 1], (*n - at - 1) * sizeof *items);
        (*n)--;
        return true;
}
