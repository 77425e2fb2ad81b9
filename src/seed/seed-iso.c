/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * SEED-2: the seed's ISO 9660 image, made in-process with libisofs.
 *
 * Why libisofs and not xorriso or genisoimage through the spawn primitive: the image is a few
 * small files that already sit in memory, and a helper program would need them staged in a
 * directory of their own under the instance's directory (more files to create, clean up after
 * a crash, and guard against links), a helper-pool slot and deadline per start, and its output
 * file by path rather than by our descriptor. libisofs (xorriso's own engine) takes the files
 * from memory and hands the image back as a stream of 2 KiB blocks, which this file collects in
 * memory and writes with base's crash-safe writer, so the seed is written exactly as the
 * records are. Its costs: libisofs runs one writer thread per image (joined before the call
 * returns), keeps a process-wide message queue, which is set once here to print nothing (its
 * errors come back as codes and are reported through *error), and its global init, done once.
 * The call blocks, so it runs on a worker like any file write.
 */
#include <pthread.h>
#include <stdint.h>
/* libisofs.h uses the fixed-width types without including their header, and declares
 * struct burn_source (the image stream) only for a program that does not use libburn. */
#define LIBISOFS_WITHOUT_LIBBURN 1
#include <libisofs/libisofs.h>

#include "seed/seed.h"

static pthread_once_t iso_once = PTHREAD_ONCE_INIT;
static int iso_init_result;

static void iso_init_once(void)
{
        iso_init_result = iso_init();
        if (iso_init_result >= 0)
                /* Queue nothing, print nothing: errors come back as return codes. */
                iso_set_msgs_severities("NEVER", "NEVER", "seed");
}

static int iso_error(char **error, int code, const char *step)
{
        return error_set(error, -EIO, "seed ISO: %s: %s", step, iso_error_to_msg(code));
}

DEFINE_TRIVIAL_CLEANUP_FUNC(IsoImage *, iso_image_unref);
DEFINE_TRIVIAL_CLEANUP_FUNC(IsoWriteOpts *, iso_write_opts_free);

/* Adds name with a copy of the file's bytes (libisofs frees the copy with the image). */
static int iso_add(IsoImage *image, const char *name, const SeedFile *f, char **error)
{
        if (!f->data)
                return 0;
        /* iso_memory_stream_new() refuses an empty buffer; one byte more, never read. */
        unsigned char *copy = malloc(f->size + 1);
        if (!copy)
                return error_set_oom(error);
        memcpy(copy, f->data, f->size);
        IsoStream *stream = NULL;
        int r = iso_memory_stream_new(copy, f->size, &stream);
        if (r < 0) {
                free(copy);
                return iso_error(error, r, name);
        }
        IsoFile *file = NULL;
        /* The file takes the stream's reference over; on failure it is still ours. */
        r = iso_image_add_new_file(image, iso_image_get_root(image), name, stream, &file);
        if (r < 0) {
                iso_stream_unref(stream);
                return iso_error(error, r, name);
        }
        /* Rock Ridge's view: root's read-only files, as cloud-init expects none other. */
        iso_node_set_permissions((IsoNode *)file, 0444);
        return 0;
}

int seed_iso_build(const SeedFiles *files, void **ret, size_t *ret_size, char **error)
{
        (void)pthread_once(&iso_once, iso_init_once);
        if (iso_init_result < 0)
                return iso_error(error, iso_init_result, "init");

        _cleanup_(iso_image_unrefp) IsoImage *image = NULL;
        int r = iso_image_new(SEED_VOLUME_ID, &image);
        if (r < 0)
                return iso_error(error, r, "new image");
        iso_image_set_volume_id(image, SEED_VOLUME_ID);
        if ((r = iso_add(image, "meta-data", &files->meta_data, error)) < 0 ||
            (r = iso_add(image, "user-data", &files->user_data, error)) < 0 ||
            (r = iso_add(image, "network-config", &files->network_config, error)) < 0 ||
            (r = iso_add(image, "vendor-data", &files->vendor_data, error)) < 0)
                return r;

        /* Profile 0 ("basic") with Rock Ridge (Linux reads names and modes from it) and Joliet
         * (Windows' cloudbase-init reads that): both name the files exactly. */
        _cleanup_(iso_write_opts_freep) IsoWriteOpts *opts = NULL;
        if ((r = iso_write_opts_new(&opts, 0)) < 0)
                return iso_error(error, r, "write options");
        /* ISO 9660 allows upper case only in the volume id; NoCloud documents `cidata` and
         * blkid reports the label as written, so the lowercase id is kept (as genisoimage -V
         * and xorriso -volid write it). */
        if ((r = iso_write_opts_set_rockridge(opts, 1)) < 0 ||
            (r = iso_write_opts_set_joliet(opts, 1)) < 0 ||
            (r = iso_write_opts_set_relaxed_vol_atts(opts, 1)) < 0 ||
            /* Joliet names exactly as the files are called ("meta-data", not "meta-data.;1"),
             * as genisoimage and xorriso write them; ISO 9660's own names stay standard. */
            (r = iso_write_opts_set_omit_version_numbers(opts, 2)) < 0 ||
            (r = iso_write_opts_set_no_force_dots(opts, 2)) < 0)
                return iso_error(error, r, "write options");

        struct burn_source *src = NULL;
        if ((r = iso_image_create_burn_source(image, opts, &src)) < 0)
                return iso_error(error, r, "start writing");
        _cleanup_free_ unsigned char *buf = NULL;
        size_t size = 0, allocated = 0;
        int k = 0;
        for (;;) {
                if (size + 2048 > allocated) {
                        if (allocated >= SEED_ISO_MAX) {
                                k = -EFBIG;
                                break;
                        }
                        size_t want = allocated ? allocated * 2 : 256 * 1024;
                        unsigned char *p = realloc(buf, want);
                        if (!p) {
                                k = -ENOMEM;
                                break;
                        }
                        buf = p;
                        allocated = want;
                }
                int n = src->read_xt(src, buf + size, 2048);
                if (n <= 0) {
                        k = n < 0 ? -EIO : 0;
                        break;
                }
                size += (size_t)n;
        }
        /* Ends the writer thread whether or not it got to the end. */
        if (k < 0)
                src->cancel(src);
        src->free_data(src);
        free(src);
        if (k == -EFBIG)
                return error_set(error, k, "seed ISO is larger than %d bytes", SEED_ISO_MAX);
        if (k == -ENOMEM)
                return error_set_oom(error);
        if (k < 0 || size == 0)
                return error_set(error, -EIO, "seed ISO: the image writer failed");
        *ret = TAKE_PTR(buf);
        *ret_size = size;
        return 0;
}

int seed_iso_write_at(int dirfd, const char *name, const SeedFiles *files, char **error)
{
        _cleanup_free_ void *iso = NULL;
        size_t size = 0;
        int r = seed_iso_build(files, &iso, &size, error);
        if (r < 0)
                return r;
        WriteStep step = WRITE_STEP_CREATE;
        r = write_file_atomic_at(dirfd, name, iso, size, 0600, &step);
        if (r < 0) {
                static const char *const steps[] = {
                    [WRITE_STEP_CREATE] = "create", [WRITE_STEP_WRITE] = "write",
                    [WRITE_STEP_SYNC] = "fsync",    [WRITE_STEP_CLOSE] = "close",
                    [WRITE_STEP_RENAME] = "rename", [WRITE_STEP_SYNC_DIR] = "fsync directory",
                };
                return error_set(error, r, "write %s (%s): %s", name, steps[step], strerror(-r));
        }
        return 0;
}
