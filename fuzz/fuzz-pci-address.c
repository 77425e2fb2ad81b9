/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Fuzzes parse_pci_address (GEN-5). The parser accepts exactly one spelling per address, so an
 * accepted input must equal its own canonical rendering, and that rendering must read back to
 * the same address.
 */
#include "base/base.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        _cleanup_free_ char *s = malloc(size + 1);
        if (!s)
                return 0;
        memcpy(s, data, size);
        s[size] = 0;

        PciAddress a;
        bool valid = pci_address_is_valid(s);
        if (parse_pci_address(s, &a) < 0) {
                if (valid)
                        abort();
                return 0;
        }
        if (!valid || a.function > 7)
                abort();

        char buf[PCI_ADDRESS_STRLEN];
        if (pci_address_format(&a, buf) != buf || !streq(buf, s))
                abort();

        PciAddress b;
        if (parse_pci_address(buf, &b) < 0 || a.domain != b.domain || a.bus != b.bus ||
            a.device != b.device || a.function != b.function)
                abort();
        return 0;
}
