#!/bin/sh
# Builds (once) the arm64 Debian root filesystem that `make portability` runs the real models in, under
# qemu-user emulation (benchmarks/portability_arm64.py drives it and calls this script when needed).
#
#   sh benchmarks/portability_arm64_root.sh [ROOT]        # default ROOT: .testmodels/arm64-root
#
# What goes in, all from Debian's archive for arm64 except one wheel:
#   - `debootstrap --arch=arm64 --foreign --variant=minbase SUITE`: the base system, downloaded and checked
#     against the archive's signed Release file, plus the packages of PACKAGES below (Debian's arm64
#     Python 3 and NumPy, onnx, gmpy2, cryptography, orjson). --foreign: debootstrap's second stage would
#     run the arm64 dpkg, which needs the kernel's binfmt_misc to start arm64 programs; instead every
#     downloaded package is unpacked here (dpkg-deb) and the two things their maintainer scripts would
#     do that a Python run needs are done by hand: the BLAS/LAPACK alternatives and the loader cache.
#   - ml_dtypes, which Debian does not package: the manylinux aarch64 wheel from PyPI (version and
#     sha256 pinned below), unpacked into /usr/local/lib/python3.X/dist-packages of the root.
#   - with SEALTRACE_ARM64_ONNX=VERSION (default: debian), onnx==VERSION and the newest protobuf from PyPI
#     (their aarch64 wheels, unpacked the same way, ahead of Debian's on sys.path) in place of Debian's
#     onnx and protobuf: Debian's onnx can be older than the one x86-64 runs with.
#   - qemu-aarch64-static (an x86-64 static program) copied into the root's /usr/bin, so that
#     `chroot ROOT /usr/bin/qemu-aarch64-static /usr/bin/python3 ...` runs without binfmt_misc.
#
# Needs: Debian or Ubuntu (apt-get, dpkg-deb), root (debootstrap and chroot), the Debian mirror and PyPI
# reachable. debootstrap and qemu-user-static are used from the system when installed, else `apt-get
# download`ed and unpacked into .testmodels/arm64-tools (nothing installed system-wide).
# Exit status: 0 built or already there, 2 a prerequisite is missing, 1 the build failed.
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
ROOT=${1:-$REPO/.testmodels/arm64-root}
TOOLS=${SEALTRACE_ARM64_TOOLS:-$REPO/.testmodels/arm64-tools}
SUITE=${SEALTRACE_ARM64_SUITE:-trixie}
MIRROR=${SEALTRACE_ARM64_MIRROR:-http://deb.debian.org/debian}
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
# sealtrace's imports on the path `Session(...).run(..., audit=AuditRecorder(...))` with the reference
# backend: numpy, onnx (with protobuf and typing_extensions), gmpy2, cryptography, orjson, ml_dtypes.
# python3-cffi-backend: cryptography depends on it through a virtual package, which debootstrap's
# resolver does not follow.
PACKAGES=python3,python3-numpy,python3-onnx,python3-protobuf,python3-typing-extensions,python3-gmpy2,python3-cryptography,python3-cffi-backend,python3-orjson
ML_DTYPES=0.5.4
# sha256 of ml_dtypes-0.5.4-cp313-cp313-manylinux_2_27_aarch64.manylinux_2_28_aarch64.whl (PyPI).
ML_DTYPES_SHA256=ce756d3a10d0c4067172804c9cc276ba9cc0ff47af9078ad439b075d1abdc29b
ONNX=${SEALTRACE_ARM64_ONNX:-debian}
RECIPE="suite=$SUITE packages=$PACKAGES ml_dtypes=$ML_DTYPES onnx=$ONNX"
STAMP=$ROOT/.sealtrace-root

missing() { echo "portability_arm64_root.sh: $*" >&2; exit 2; }
note() { echo "== $*"; }

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$RECIPE" ]; then
	echo "arm64 root present: $ROOT ($SUITE)"
	exit 0
fi

[ -f /etc/debian_version ] && command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 \
	|| missing "not Debian or Ubuntu: building the arm64 root needs apt-get and dpkg-deb"
[ "$(id -u)" -eq 0 ] || missing "needs root (debootstrap unpacks device nodes and owners; the runs use chroot)"
[ -x "$PYTHON" ] || PYTHON=python3
"$PYTHON" -m pip --version >/dev/null 2>&1 || missing "no pip for $PYTHON (set PYTHON to a Python with pip; make venv)"
if command -v wget >/dev/null 2>&1; then
	wget -q -O /dev/null "$MIRROR/dists/$SUITE/Release" || missing "cannot reach the Debian mirror $MIRROR (network?)"
elif command -v curl >/dev/null 2>&1; then
	curl -fsS -o /dev/null "$MIRROR/dists/$SUITE/Release" || missing "cannot reach the Debian mirror $MIRROR (network?)"
fi

# debootstrap and qemu-aarch64-static: the system's, else Debian's packages unpacked into $TOOLS.
fetch_tool() {  # package
	mkdir -p "$TOOLS"
	note "apt-get download $1, unpacked into $TOOLS (nothing installed system-wide)"
	(cd "$TOOLS" && rm -f "$1"_*.deb && apt-get download -q "$1" >/dev/null && dpkg-deb -x "$1"_*.deb .) \
		|| missing "could not apt-get download $1 (no network to the apt mirror? try apt-get update first)"
}
if command -v debootstrap >/dev/null 2>&1; then
	DEBOOTSTRAP=$(command -v debootstrap)
else
	[ -x "$TOOLS/usr/sbin/debootstrap" ] || fetch_tool debootstrap
	DEBOOTSTRAP="$TOOLS/usr/sbin/debootstrap"
	export DEBOOTSTRAP_DIR="$TOOLS/usr/share/debootstrap"
fi
if command -v qemu-aarch64-static >/dev/null 2>&1; then
	QEMU=$(command -v qemu-aarch64-static)
else
	[ -x "$TOOLS/usr/bin/qemu-aarch64-static" ] || fetch_tool qemu-user-static
	QEMU="$TOOLS/usr/bin/qemu-aarch64-static"
fi
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$KEYRING" ] || missing "$KEYRING not found (apt-get install debian-archive-keyring)"

BUILD=$ROOT.partial
rm -rf "$BUILD"
mkdir -p "$(dirname "$ROOT")"
note "debootstrap --arch=arm64 --foreign --variant=minbase $SUITE (Debian's arm64 packages, signature checked)"
note "   with $PACKAGES"
"$DEBOOTSTRAP" --arch=arm64 --foreign --variant=minbase --keyring="$KEYRING" --include="$PACKAGES" \
	"$SUITE" "$BUILD" "$MIRROR" >"$BUILD.log" 2>&1 || {
	tail -n 20 "$BUILD.log" >&2
	echo "portability_arm64_root.sh: debootstrap failed (log: $BUILD.log)" >&2
	exit 1
}

# The second stage's unpacking, without running the arm64 dpkg: every downloaded package's files
# (the essential ones are already there; unpacking them again changes nothing). Kept directory
# symlinks: the root has merged /usr (/lib -> usr/lib ...).
note "unpacking the $(wc -l <"$BUILD/debootstrap/debpaths") downloaded packages into the root (dpkg-deb)"
while read -r _pkg deb; do
	dpkg-deb --fsys-tarfile "$BUILD$deb" | tar -x --keep-directory-symlink -C "$BUILD"
done <"$BUILD/debootstrap/debpaths"
# What libblas3's and liblapack3's maintainer scripts do: the libblas.so.3 / liblapack.so.3 alternatives
# (Debian's reference BLAS and LAPACK, the only providers installed).
LIBDIR=$BUILD/usr/lib/aarch64-linux-gnu
for lib in blas/libblas.so.3 lapack/liblapack.so.3; do
	[ -e "$LIBDIR/$lib" ] || { echo "portability_arm64_root.sh: $lib missing from the root" >&2; exit 1; }
	ln -sf "$lib" "$LIBDIR/$(basename "$lib")"
done
cp "$QEMU" "$BUILD/usr/bin/qemu-aarch64-static"
# libc-bin's trigger: the loader cache (ldconfig chroots into the root itself; static program).
chroot "$BUILD" /usr/bin/qemu-aarch64-static /usr/sbin/ldconfig

PYVER=$(cd "$BUILD/usr/lib" && ls -d python3.[0-9]* | sort -V | tail -n 1)
TAG=cp$(echo "${PYVER#python}" | tr -d .)
note "ml_dtypes==$ML_DTYPES for $TAG aarch64 from PyPI (Debian does not package it) -> /usr/local/lib/$PYVER/dist-packages"
WHEELS=$BUILD.wheels
rm -rf "$WHEELS"
PLATFORMS=""
for minor in 17 24 26 27 28 31 34 35 36 39 41; do PLATFORMS="$PLATFORMS --platform manylinux_2_${minor}_aarch64"; done
download() {  # requirement...: aarch64 wheels for the root's Python into $WHEELS
	# shellcheck disable=SC2086
	"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --implementation cp --python-version "${PYVER#python}" \
		--abi "$TAG" --abi abi3 --abi none --platform manylinux2014_aarch64 --platform any $PLATFORMS -d "$WHEELS" "$@" \
		|| missing "could not download $* for $TAG aarch64 from PyPI (network?)"
}
download "ml_dtypes==$ML_DTYPES"
WHEEL=$(ls "$WHEELS"/ml_dtypes-*.whl)
echo "$ML_DTYPES_SHA256  $WHEEL" | sha256sum -c --quiet - \
	|| { echo "portability_arm64_root.sh: $WHEEL: sha256 differs from the pinned one" >&2; exit 1; }
if [ "$ONNX" != debian ]; then
	note "onnx==$ONNX and protobuf for $TAG aarch64 from PyPI, in place of Debian's (SEALTRACE_ARM64_ONNX)"
	download "onnx==$ONNX" protobuf
fi
SITE=$BUILD/usr/local/lib/$PYVER/dist-packages
mkdir -p "$SITE"
for wheel in "$WHEELS"/*.whl; do
	"$PYTHON" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$wheel" "$SITE"
done
rm -rf "$WHEELS"

# Importing writes the bytecode of what it imports (Debian's packages ship none; their maintainer
# scripts would compile it), so that each emulated run does not compile those modules again.
note "checking: the root's python3 imports numpy, onnx, gmpy2, ml_dtypes, cryptography, orjson"
chroot "$BUILD" /usr/bin/qemu-aarch64-static /usr/bin/python3 -c \
	'import platform, numpy, onnx, gmpy2, ml_dtypes, cryptography, orjson; print("  ", platform.machine(), "Python", platform.python_version(), "NumPy", numpy.__version__, "onnx", onnx.__version__)'

# The downloaded packages are no longer needed (about 60 MB).
rm -f "$BUILD"/var/cache/apt/archives/*.deb
echo "$RECIPE" >"$BUILD/.sealtrace-root"
rm -rf "$ROOT" "$BUILD.log"
mv "$BUILD" "$ROOT"
echo "arm64 root built: $ROOT"
