# shellcheck shell=bash
# Helpers sourced by scripts/serve and scripts/test.
# Safe under `set -euo pipefail`; every function returns non-zero on failure.
# Assumes Debian 12, running as root, no systemd (see shared/SERVICES.md).

# Make a rustup-installed toolchain visible even when PATH was trimmed.
if ! command -v cargo >/dev/null 2>&1 && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
    export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi

log() { printf '[delayq] %s\n' "$*" >&2; }
die() { printf '[delayq] ERROR: %s\n' "$*" >&2; exit 1; }

# Run an apt-get command, waiting for (rather than failing on) a dpkg/apt lock
# held by another apt-get that may be running on the machine.
_apt_get() {
    local try
    for try in 1 2 3 4 5 6 7 8 9 10; do
        if DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 "$@"; then
            return 0
        fi
        log "apt-get $* failed (try $try/10); waiting 10 s in case apt/dpkg is locked"
        sleep 10
    done
    return 1
}

_pkg_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

# ensure_apt_packages PKG... : install only the missing ones; `apt-get update`
# runs once, and only when something is missing.
ensure_apt_packages() {
    local missing=() p
    for p in "$@"; do
        _pkg_installed "$p" || missing+=("$p")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    log "installing ${missing[*]}"
    # apt's chatter goes to stderr: scripts such as cluster/zk print their
    # result on stdout.
    _apt_get update -q >&2
    _apt_get install -y -q "${missing[@]}" >&2
}

ensure_redis_binary() { ensure_apt_packages redis-server redis-tools; }

# diesel's mysql feature links libmysqlclient (found through pkg-config),
# its postgres feature libpq.
ensure_build_deps() { ensure_apt_packages default-libmysqlclient-dev libpq-dev pkg-config; }

# ensure_rust_tools: cargo fmt, cargo clippy and cargo nextest.
ensure_rust_tools() {
    command -v cargo >/dev/null 2>&1 || die "cargo not found (install a Rust toolchain with rustup)"
    local comps=()
    cargo fmt --version >/dev/null 2>&1 || comps+=(rustfmt)
    cargo clippy --version >/dev/null 2>&1 || comps+=(clippy)
    if [ "${#comps[@]}" -gt 0 ]; then
        command -v rustup >/dev/null 2>&1 || die "missing ${comps[*]} and no rustup to add them"
        log "rustup component add ${comps[*]}"
        rustup component add "${comps[@]}"
    fi
    if ! cargo nextest --version >/dev/null 2>&1; then
        log "cargo install cargo-nextest --locked"
        cargo install cargo-nextest --locked
    fi
}

# ensure_mdbook: mdBook, which builds the book in docs/ (scripts/test checks
# it builds). Without its default features (`serve`, `watch`, the search
# index): the book builds the same, and the install compiles less.
ensure_mdbook() {
    if ! mdbook --version >/dev/null 2>&1; then
        log "cargo install --locked mdbook --no-default-features"
        cargo install --locked mdbook --no-default-features
    fi
}

# ---------------------------------------------------------------- MariaDB ----

_mariadb_ping() { mariadb-admin ping >/dev/null 2>&1; }

# ensure_mariadb: installed, running (started only if not answering; never
# stopped), with database `delayq` and user delayq/delayq (127.0.0.1 and
# localhost) granted ALL on `delayq`.* and on `delayq\_test%`.*.
ensure_mariadb() {
    ensure_apt_packages mariadb-server mariadb-client
    if ! _mariadb_ping; then
        log "starting MariaDB"
        mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
        start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
        for _ in $(seq 1 40); do
            _mariadb_ping && break
            sleep 0.5
        done
        _mariadb_ping || die "MariaDB did not answer 'mariadb-admin ping' within 20 s (see /var/log/mysql/ or run /usr/sbin/mariadbd --user=mysql in the foreground)"
    fi
    local host
    for host in 127.0.0.1 localhost; do
        mariadb -uroot <<SQL || die "could not set up database/user in MariaDB as root over the socket"
CREATE DATABASE IF NOT EXISTS \`delayq\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
CREATE USER IF NOT EXISTS 'delayq'@'${host}' IDENTIFIED BY 'delayq';
ALTER USER 'delayq'@'${host}' IDENTIFIED BY 'delayq';
GRANT ALL PRIVILEGES ON \`delayq\`.* TO 'delayq'@'${host}';
GRANT ALL PRIVILEGES ON \`delayq\\_test%\`.* TO 'delayq'@'${host}';
SQL
    done
    mariadb -uroot -e 'FLUSH PRIVILEGES'
    # Prove the grants: the tests create and drop delayq_test_* databases over TCP.
    mariadb --no-defaults -h127.0.0.1 -P3306 -udelayq -pdelayq -e \
        'CREATE DATABASE IF NOT EXISTS delayq_test_probe; DROP DATABASE delayq_test_probe;' \
        || die "user delayq cannot create/drop delayq_test_probe over TCP 127.0.0.1:3306"
}

# --------------------------------------------------------------- Postgres ----

_postgres_ping() { pg_isready -q -h 127.0.0.1 -p 5432 >/dev/null 2>&1; }

# ensure_postgres: installed, its first cluster on port 5432 running (started
# only if not answering; never stopped), with a login role delayq/delayq
# that may create databases (the tests make and drop delayq_test_* ones) and
# a database `delayq` it owns.
ensure_postgres() {
    ensure_apt_packages postgresql postgresql-client
    if ! _postgres_ping; then
        local cluster
        cluster=$(pg_lsclusters --no-header 2>/dev/null | awk '$3 == 5432 { print $1 " " $2; exit }')
        if [ -z "$cluster" ]; then
            local version
            version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
            [ -n "$version" ] || die "no PostgreSQL server under /usr/lib/postgresql"
            log "creating PostgreSQL cluster $version/main on port 5432"
            pg_createcluster --port 5432 "$version" main >&2
            cluster="$version main"
        fi
        log "starting PostgreSQL ($cluster)"
        # shellcheck disable=SC2086
        pg_ctlcluster $cluster start >&2 || true
        for _ in $(seq 1 40); do
            _postgres_ping && break
            sleep 0.5
        done
        _postgres_ping || die "PostgreSQL did not answer pg_isready on 127.0.0.1:5432 within 20 s (see /var/log/postgresql/)"
    fi
    # TLS as Debian sets a cluster up (its self-signed snakeoil certificate):
    # tests/it/tls.rs connects with sslmode=verify-ca against it.
    if [ "$(su postgres -c "psql -tAc 'SHOW ssl'")" != on ]; then
        ensure_apt_packages ssl-cert
        [ -f /etc/ssl/private/ssl-cert-snakeoil.key ] || make-ssl-cert generate-default-snakeoil >&2
        log "turning TLS on in PostgreSQL (the snakeoil certificate)"
        su postgres -c "psql -q -v ON_ERROR_STOP=1" <<'SQL' >&2 || die "could not turn TLS on in PostgreSQL"
ALTER SYSTEM SET ssl_cert_file = '/etc/ssl/certs/ssl-cert-snakeoil.pem';
ALTER SYSTEM SET ssl_key_file = '/etc/ssl/private/ssl-cert-snakeoil.key';
ALTER SYSTEM SET ssl = on;
SELECT pg_reload_conf();
SQL
    fi
    su postgres -c "psql -q -v ON_ERROR_STOP=1" <<'SQL' >&2 || die "could not set up role/database in PostgreSQL as postgres over the socket"
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'delayq') THEN
    CREATE ROLE delayq LOGIN PASSWORD 'delayq' CREATEDB;
  ELSE
    ALTER ROLE delayq LOGIN PASSWORD 'delayq' CREATEDB;
  END IF;
END $$;
-- A test drops its database WITH (FORCE), which ends the sessions still
-- on it: an autovacuum worker there is the server's, not delayq's, and
-- ending it takes pg_signal_backend.
GRANT pg_signal_backend TO delayq;
SQL
    if ! su postgres -c "psql -tAc \"SELECT 1 FROM pg_database WHERE datname = 'delayq'\"" | grep -q 1; then
        su postgres -c "createdb -O delayq delayq" >&2
    fi
    # Prove it: the tests create and drop delayq_test_* databases over TCP.
    PGPASSWORD=delayq psql -q -h 127.0.0.1 -p 5432 -U delayq -d delayq -v ON_ERROR_STOP=1 \
        -c 'CREATE DATABASE delayq_test_probe' -c 'DROP DATABASE delayq_test_probe' >&2 \
        || die "role delayq cannot create/drop delayq_test_probe over TCP 127.0.0.1:5432"
}

# ------------------------------------------------------------------ Redis ----

# redis_answers URL: true when a Redis at URL answers PING with PONG.
redis_answers() {
    local url=$1 out
    # redis-cli sends AUTH "" pw for redis://:pw@...; name the default user.
    url=${url/#redis:\/\/:/redis://default:}
    out=$(timeout 5 redis-cli --no-auth-warning -u "$url" ping 2>/dev/null) || return 1
    [ "$out" = "PONG" ]
}

# _redis_url_parts URL -> prints "scheme host port password" (password may be empty).
_redis_url_parts() {
    local url=$1 scheme rest auth="" hostport host port pass=""
    scheme=${url%%://*}
    [ "$scheme" != "$url" ] || { scheme=redis; }
    rest=${url#*://}
    rest=${rest%%/*}
    rest=${rest%%\?*}
    if [[ $rest == *@* ]]; then
        auth=${rest%@*}
        hostport=${rest##*@}
        [[ $auth == *:* ]] && pass=${auth#*:}
    else
        hostport=$rest
    fi
    if [[ $hostport == \[*\]* ]]; then            # [ipv6]:port
        host=${hostport%%]*}; host=${host#[}
        port=${hostport##*]}; port=${port#:}
    else
        host=${hostport%%:*}
        port=${hostport#"$host"}; port=${port#:}
    fi
    printf '%s %s %s %s\n' "$scheme" "${host:-127.0.0.1}" "${port:-6379}" "$pass"
}

# ensure_local_redis URL DIR: if nothing answers at URL and URL's host is
# 127.0.0.1/localhost, start a persistent (AOF) daemonized redis-server on
# that port with its data, log and pid file in DIR. A running Redis is reused;
# a remote one that does not answer is an error. Never stops anything.
ensure_local_redis() {
    local url=$1 dir=$2 scheme host port pass
    if redis_answers "$url"; then
        log "Redis answers at $url; reusing it"
        return 0
    fi
    read -r scheme host port pass <<<"$(_redis_url_parts "$url")"
    case "$host" in
        127.0.0.1|localhost) ;;
        *) die "nothing answers at Redis URL $url (host $host is not local, so it will not be started here); start it or set DELAYQ_REDIS_URL" ;;
    esac
    [ "$scheme" = redis ] || die "nothing answers at $url; only plain redis:// URLs can be started locally"
    [[ $port =~ ^[0-9]+$ ]] || die "bad port '$port' in Redis URL $url"
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)     # redis-server chdirs to --dir: use absolute paths
    local args=(--daemonize yes --bind 127.0.0.1 --port "$port"
                --appendonly yes --dir "$dir"
                --logfile "$dir/redis.log" --pidfile "$dir/redis.pid")
    [ -n "$pass" ] && args+=(--requirepass "$pass")
    log "starting redis-server on 127.0.0.1:$port (data in $dir)"
    redis-server "${args[@]}" || die "redis-server failed to start; see $dir/redis.log"
    for _ in $(seq 1 50); do
        redis_answers "$url" && return 0
        sleep 0.2
    done
    tail -n 20 "$dir/redis.log" >&2 2>/dev/null || true
    die "redis-server started on port $port but $url does not answer PING (port taken by something else?)"
}

# -------------------------------------------------------- cluster tools ----

# ZooKeeper (the cluster's coordinator) and Java: cluster/zk runs the servers.
ensure_zookeeper() { ensure_apt_packages zookeeper; }

# nginx: cluster/nginx runs it in front of the nodes.
ensure_nginx() { ensure_apt_packages nginx; }

# RabbitMQ and NATS: tests/it/forward.rs starts its own of each (binaries only;
# apt's policy keeps the packaged RabbitMQ service from starting).
ensure_brokers() { ensure_apt_packages rabbitmq-server nats-server; }
# Chromium and chromedriver: tests/it/ui.rs drives the dashboard in a headless
# browser over WebDriver.
ensure_chromium() { ensure_apt_packages chromium chromium-driver; }
# libfaketime: tests/it/promises.rs runs a node whose wall clock is off by seconds
# (LD_PRELOAD on that process alone).
ensure_faketime() { ensure_apt_packages faketime; }

# The clients' toolchains (clients/*): Node.js with npm (the machine's own
# when it has one; Debian's otherwise), Go and Java 17 with Maven from
# Debian's archive.
ensure_node() {
    if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then return 0; fi
    ensure_apt_packages nodejs npm
}
ensure_go() { ensure_apt_packages golang-go; }
# Maven runs offline against /usr/share/maven-repo, which these packages
# fill (clients/java/build).
ensure_java() {
    command -v javac >/dev/null 2>&1 || ensure_apt_packages openjdk-17-jdk-headless
    ensure_apt_packages maven libmaven-compiler-plugin-java libmaven-resources-plugin-java \
        libmaven-jar-plugin-java libsurefire-java junit5
}

# recorded_pid PIDFILE ERE: print the pid in PIDFILE if that process still
# runs and one of its command-line arguments matches the extended regular
# expression ERE (so a pid the kernel has since given to another program is
# never signalled).
recorded_pid() {
    local file=$1 match=$2 pid
    [ -f "$file" ] || return 1
    pid=$(cat "$file" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" | grep -qE -- "$match" || return 1
    echo "$pid"
}

# stop_pid PID [SECONDS]: SIGCONT + SIGTERM, then SIGKILL after SECONDS (10).
stop_pid() {
    local pid=$1 secs=${2:-10} i
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < secs * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    log "pid $pid did not exit within ${secs} s of SIGTERM; SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

# http_ok URL: true when URL answers 2xx within 3 s.
http_ok() { curl -fsS --noproxy '*' -m 3 -o /dev/null "$1" 2>/dev/null; }

# ------------------------------------------------------------ schemathesis ----

# The version tests/it/openapi.rs runs against the server's own OpenAPI document.
SCHEMATHESIS_VERSION=4.32.5

# ensure_schemathesis: schemathesis (PyPI), pinned, in a venv under the cache
# dir; prints the path of its executable.
ensure_schemathesis() {
    local venv="${XDG_CACHE_HOME:-$HOME/.cache}/delayq/schemathesis-$SCHEMATHESIS_VERSION"
    local bin="$venv/bin/schemathesis"
    if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -qF "$SCHEMATHESIS_VERSION"; then
        echo "$bin"
        return 0
    fi
    python3 -m venv --help >/dev/null 2>&1 || ensure_apt_packages python3-venv
    log "installing schemathesis $SCHEMATHESIS_VERSION into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q "schemathesis==$SCHEMATHESIS_VERSION" >&2
    "$bin" --version >&2 || die "schemathesis did not install into $venv"
    echo "$bin"
}

# Port reservations shared by every cluster/zk and cluster/redis-cluster on
# this machine (and the tests, see tests/it/common), so services started at
# the same moment (parallel tests) never pick the same port.
RESERVATIONS=${TMPDIR:-/tmp}/delayq-zk-ports

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# reserve PORT: atomically claim PORT for as long as the process that asked
# for the service (this script's parent: a test, or an operator's shell)
# runs, so a server it stops and starts again on that port finds it free
# however long the test runs. A claim whose owner is gone, or older than
# 6 hours, or unreadable and older than 10 minutes, is stale.
reserve() {
    local f=$RESERVATIONS/$1 owner age
    mkdir -p "$RESERVATIONS"
    if [ -e "$f" ]; then
        owner=$(cat "$f" 2>/dev/null || true)
        age=$(( $(date +%s) - $(stat -c %Y "$f" 2>/dev/null || echo 0) ))
        if [ "$age" -gt 21600 ] \
            || { [[ $owner =~ ^[0-9]+$ ]] && ! kill -0 "$owner" 2>/dev/null; } \
            || { ! [[ $owner =~ ^[0-9]+$ ]] && [ "$age" -gt 600 ]; }; then
            rm -f "$f"
        fi
    fi
    ( set -o noclobber; echo "$PPID" >"$f" ) 2>/dev/null
}

# pick_port: a free, reserved loopback port. Below the kernel's ephemeral
# range (32768+), so no outgoing connection or port-0 listener of another
# process takes it between the pick and the bind.
pick_port() {
    local p
    for _ in $(seq 1 500); do
        p=$(( 10000 + (RANDOM * 32768 + RANDOM) % 22000 ))
        if port_free "$p" && reserve "$p"; then echo "$p"; return 0; fi
    done
    die "no free port found between 10000 and 31999"
}

# cpu_ticks PID: the CPU time (user + system, 1/100 s) a process used.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# thread_ticks PID: the CPU time (1/100 s) of a process's threads, summed
# by thread name: one "name ticks" line each (the HTTP workers, the
# journal's writers, ...).
thread_ticks() {
    local t stat name
    for t in /proc/"$1"/task/*; do
        name=$(tr ' ' _ <"$t/comm" 2>/dev/null) || continue
        stat=$(cat "$t/stat" 2>/dev/null) || continue
        # The fields after the name: utime and stime are the 12th and 13th.
        awk -v n="$name" '{print n, $12 + $13}' <<<"${stat##*) }"
    done | awk '{a[$1] += $2} END {for (k in a) print k, a[k]}'
}

# thread_seconds BEFORE AFTER: from two thread_ticks listings, a JSON
# object of the CPU seconds each thread name used between them. A name
# listed more than once (several processes' listings put together) counts
# as their sum; blank lines are skipped.
thread_seconds() {
    (echo "$1" | sed 's/^/0 /'; echo "$2" | sed 's/^/1 /') |
        awk 'NF == 3 {d[$2] += ($1 == 1 ? $3 : -$3)} END {for (k in d) if (d[k] > 0) print k, d[k]}' |
        jq -Rn '[inputs | split(" ") | {(.[0]): ((.[1] | tonumber) / 100)}] | add // {}'
}
