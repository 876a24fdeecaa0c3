#!/usr/bin/env python3
"""Writes a C++ header holding a text file as a raw string literal.

Usage: embed_schema.py INPUT OUTPUT SYMBOL
The header declares `inline constexpr char SYMBOL[]` in namespace rill::graph,
so the job file loader parses the very schema the build was made from.
"""
import sys

DELIMITER = "rill_schema"


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    source, output, symbol = sys.argv[1:]
    with open(source, encoding="utf-8") as f:
        text = f.read()
    if f"){DELIMITER}\"" in text:
        print(f"{source}: contains the raw string delimiter {DELIMITER}", file=sys.stderr)
        return 1
    header = (
        f"// Generated from {source.split('/')[-1]} by graph/embed_schema.py. Do not edit.\n"
        "#pragma once\n\n"
        "namespace rill::graph {\n\n"
        f"inline constexpr char {symbol}[] = R\"{DELIMITER}({text}){DELIMITER}\";\n\n"
        "}  // namespace rill::graph\n"
    )
    with open(output, "w", encoding="utf-8") as f:
        f.write(header)
    return 0


if __name__ == "__main__":
    sys.exit(main())
