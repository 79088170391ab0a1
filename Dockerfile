# waitmeter agent image: one fully static binary on an empty base.
#
#   docker build -t waitmeter:0.1.0 .                  from source (stage "build": Debian + rustup)
#   make image                                         from the binary `make static` built here:
#                                                      buildah, stage "release", dist/waitmeter.oci.tar
#
# Both images are the same runtime stage below with the same binary recipe: the build stage runs
# the commands of `make static` (Makefile). See docs/deployment.md for how the image runs (uid 0,
# three capabilities).

# ---- runtime ----------------------------------------------------------------------------
FROM scratch AS runtime
# uid 0, on purpose: the kernel checks CAP_BPF/CAP_PERFMON/CAP_SYS_PTRACE in the effective
# set. A non-root user gets a container's added capabilities only in its bounding set (and
# Kubernetes sets no ambient capabilities); file capabilities would need privilege escalation
# at exec, which allowPrivilegeEscalation: false (no_new_privs) forbids. So the pod runs
# uid 0 with every capability dropped except those three (helm/waitmeter).
USER 0:0
EXPOSE 9747
ENTRYPOINT ["/usr/bin/waitmeter"]
CMD ["run", "--all", "--listen", "0.0.0.0:9747"]

# ---- release: the static binary of `make static` (no network, no compiler) ---------------
FROM runtime AS release
COPY dist/waitmeter-linux-x86_64 /usr/bin/waitmeter

# ---- build ------------------------------------------------------------------------------
FROM debian:bookworm AS build

# The build-time part of the Makefile's APT_PKGS (clang-19: build.rs compiles the BPF
# programs with it; libelf-dev and zlib1g-dev also provide the libelf.a and libz.a linked
# statically). The rest of APT_PKGS (bpftool, prometheus, libcap2-bin, util-linux,
# python3-venv) serves vmlinux.h regeneration and the tests, not the build.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential pkg-config clang-19 libelf-dev zlib1g-dev \
      ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*

# Rust through rustup, pinned to the toolchain the project builds with.
ARG RUST_VERSION=1.95.0
ENV RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo PATH=/usr/local/cargo/bin:$PATH
RUN curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs \
      | sh -s -- -y --no-modify-path --profile minimal --default-toolchain "${RUST_VERSION}" \
 && rustup target add x86_64-unknown-linux-gnu

WORKDIR /src
# build.rs reads ../bpf (the probes and the pinned vmlinux.h); nothing else outside agent/
COPY bpf/ bpf/
COPY agent/ agent/

# `make static`: cargo build --release --locked plus the static flags:
# - libbpf-rs/static links libbpf, libelf and zlib statically (a feature of the libbpf-rs
#   dependency, enabled from the command line: agent/Cargo.toml needs no feature of its own,
#   and Cargo.lock is unchanged, so --locked holds);
# - crt-static links glibc statically; --target keeps that flag away from build.rs and proc
#   macros (which must stay dynamic). musl does not build: elfutils needs argp.
ENV LIBBPF_SYS_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu \
    RUSTFLAGS="-C target-feature=+crt-static"
RUN cd agent \
 && cargo build --release --locked --features libbpf-rs/static --target x86_64-unknown-linux-gnu \
 && cp target/x86_64-unknown-linux-gnu/release/waitmeter /waitmeter \
 && if ldd /waitmeter >/dev/null 2>&1; then echo "waitmeter is not static" >&2; exit 1; fi \
 && /waitmeter --version

# ---- the default target: the runtime stage with the binary built above --------------------
FROM runtime
COPY --from=build /waitmeter /usr/bin/waitmeter
