#!/bin/sh
# The Module.symvers line of a symbol a built module exports, read from the
# module file itself: what modpost needs to link vgpu.ko against NVIDIA's
# nvidia.ko where NVIDIA's own Module.symvers is gone (DKMS cleans its build
# tree after each build; driver containers and distribution-built modules
# never leave one on the host).  Never writes anything but stdout.
#
#   nvidia-symvers.sh [-n] MODULE [SYMBOL...]    (SYMBOL: nvidia_get_rm_ops)
#
# MODULE is a .ko, .ko.xz, .ko.zst or .ko.gz file.  Each line printed is
# "CRC<TAB>SYMBOL<TAB>MODULE-PATH<TAB>EXPORT_SYMBOL[_GPL]<TAB>NAMESPACE", as
# modpost writes it (the module path without .ko: its basename is the name
# modinfo's depends= gets).
#
# Where the CRC is: with CONFIG_MODVERSIONS every export has a __crc_SYMBOL
# symbol.  Since Linux 5.19 (6.1 included) it is a local label in the
# module's __kcrctab or __kcrctab_gpl section and the CRC is the 32-bit word
# it labels (no relocation); before 5.19 it was an absolute symbol whose
# value is the CRC.  Both are read.  The export's kind is the section of its
# __ksymtab_SYMBOL entry (__ksymtab_gpl: EXPORT_SYMBOL_GPL), its namespace
# the string at __kstrtabns_SYMBOL (empty for NVIDIA's).
#
# -n: the kernel has no CONFIG_MODVERSIONS, so modules carry no CRCs and
# modpost checks none: a missing __crc_ symbol is written as 0x00000000.
# Without -n a missing CRC is an error (a module built for a kernel with
# CONFIG_MODVERSIONS always has one).
set -eu
prog=nvidia-symvers.sh
die() { echo "$prog: $*" >&2; exit 1; }

nocrc=0
if [ "${1:-}" = "-n" ]; then nocrc=1; shift; fi
[ $# -ge 1 ] || die "usage: $prog [-n] MODULE [SYMBOL...]"
ko=$1; shift
[ $# -ge 1 ] || set -- nvidia_get_rm_ops
[ -f "$ko" ] || die "$ko: no such module file (is NVIDIA's driver installed for this kernel?)"
command -v readelf >/dev/null || die "readelf not found (binutils)"

tmp=
trap '[ -z "$tmp" ] || rm -f "$tmp"' EXIT
case $ko in
*.xz|*.zst|*.gz)
    tmp=$(mktemp "${TMPDIR:-/tmp}/nvidia-symvers.XXXXXX")
    case $ko in
    *.xz) xz -dc -- "$ko" >"$tmp" ;;
    *.zst) zstd -qdc -- "$ko" >"$tmp" ;;
    *.gz) gzip -dc -- "$ko" >"$tmp" ;;
    esac || die "$ko: cannot decompress"
    elf=$tmp ;;
*) elf=$ko ;;
esac
modpath=${ko%.xz}; modpath=${modpath%.zst}; modpath=${modpath%.gz}; modpath=${modpath%.ko}

export LC_ALL=C
hdr=$(readelf -h -W "$elf" 2>/dev/null) || die "$ko: not an ELF module"
case $hdr in *"little endian"*) le=1 ;; *) le=0 ;; esac
# "NDX VALUE NAME" of every symbol; "IDX NAME OFFSET" of every section
syms=$(readelf -s -W "$elf" | awk 'NF >= 8 && $1 ~ /^[0-9]+:$/ { print $7, $2, $8 }')
secs=$(readelf -S -W "$elf" | sed -n 's/^ *\[ *\([0-9][0-9]*\)\] */\1 /p' | awk '{ print $1, $2, $5 }')

sym_field() {   # sym_field NAME N: field N (1 ndx, 2 value) of symbol NAME
    printf '%s\n' "$syms" | awk -v s="$1" -v n="$2" '$3 == s { print $n; exit }'
}
sec_field() {   # sec_field IDX N: field N (2 name, 3 file offset) of section IDX
    printf '%s\n' "$secs" | awk -v i="$1" -v n="$2" '$1 == i { print $n; exit }'
}
file_pos() {    # file_pos SYMBOL: file offset of what SYMBOL labels
    ndx=$(sym_field "$1" 1); val=$(sym_field "$1" 2)
    off=$(sec_field "$ndx" 3)
    [ -n "$off" ] || die "$ko: $1 is in no section with contents"
    echo $((0x$off + 0x$val))
}

for sym in "$@"; do
    ndx=$(sym_field "__ksymtab_$sym" 1)
    [ -n "$ndx" ] || die "$ko does not export $sym (not NVIDIA's nvidia.ko, or a driver too old or too new for vgpu?)"
    case $(sec_field "$ndx" 2) in
    __ksymtab_gpl) kind=EXPORT_SYMBOL_GPL ;;
    *) kind=EXPORT_SYMBOL ;;
    esac
    ns=
    if [ -n "$(sym_field "__kstrtabns_$sym" 1)" ]; then
        ns=$(tail -c +$(($(file_pos "__kstrtabns_$sym") + 1)) "$elf" | head -c 256 | tr '\0' '\n' | head -n 1)
    fi
    ndx=$(sym_field "__crc_$sym" 1)
    if [ -z "$ndx" ]; then
        [ "$nocrc" = 1 ] || die "$ko has no CRC for $sym (built without CONFIG_MODVERSIONS? then pass -n)"
        crc=00000000
    elif [ "$ndx" = ABS ]; then
        v=$(sym_field "__crc_$sym" 2)
        crc=$(printf '%08x' $((0x$v & 0xffffffff)))
    else
        b=$(od -An -v -tx1 -j "$(file_pos "__crc_$sym")" -N4 "$elf" | tr -d ' \n')
        [ ${#b} -eq 8 ] || die "$ko: cannot read the CRC of $sym"
        if [ "$le" = 1 ]; then
            crc=$(echo "$b" | sed 's/\(..\)\(..\)\(..\)\(..\)/\4\3\2\1/')
        else
            crc=$b
        fi
    fi
    printf '0x%s\t%s\t%s\t%s\t%s\n' "$crc" "$sym" "$modpath" "$kind" "$ns"
done
