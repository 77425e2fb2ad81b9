#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# embed-file.py INPUT OUTPUT SYMBOL: writes a C file that defines `const char SYMBOL[]` holding
# INPUT's bytes verbatim plus a terminating NUL, and `const size_t SYMBOL_size` (without the
# NUL). The served document is then exactly the repository's file (API-19).
import sys

def main():
    if len(sys.argv) != 4:
        sys.stderr.write("usage: embed-file.py INPUT OUTPUT SYMBOL\n")
        return 2
    src, out, sym = sys.argv[1:]
    with open(src, "rb") as f:
        data = f.read()
    lines = ["/* Generated from %s by embed-file.py; do not edit. */" % src.split("/")[-1],
             "#include <stddef.h>", "",
             "const char %s[] = {" % sym]
    for i in range(0, len(data), 16):
        lines.append("    " + ", ".join("0x%02x" % b for b in data[i:i + 16]) + ",")
    lines.append("    0x00,")
    lines.append("};")
    lines.append("const size_t %s_size = %d;" % (sym, len(data)))
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0

if __name__ == "__main__":
    sys.exit(main())
