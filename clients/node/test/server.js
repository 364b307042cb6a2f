// A Redis and a delayq node of a test's own, on free ports: DELAYQ_BIN names
// the binary (default: the checkout's target/debug/delayq).
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Waits until `check()` is true (polled every 20 ms) or `ms` pass; returns its last value. */
export async function until(check, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v || Date.now() > deadline) return v;
    await sleep(20);
  }
}

/**
 * A CA and a certificate for 127.0.0.1 signed by it, made with openssl in
 * `dir`: { ca, cert, key } paths.
 */
export function privateCa(dir) {
  const f = (n) => path.join(dir, n);
  const run = (...args) => execFileSync('openssl', args, { stdio: 'ignore' });
  run('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=delayq test CA',
    '-keyout', f('ca.key'), '-out', f('ca.pem'));
  run('req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=127.0.0.1', '-keyout', f('node.key'), '-out', f('node.csr'));
  fs.writeFileSync(f('ext.cnf'), 'subjectAltName=IP:127.0.0.1\n');
  run('x509', '-req', '-in', f('node.csr'), '-CA', f('ca.pem'), '-CAkey', f('ca.key'), '-CAcreateserial',
    '-days', '2', '-extfile', f('ext.cnf'), '-out', f('node.pem'));
  return { ca: f('ca.pem'), cert: f('node.pem'), key: f('node.key') };
}

export class Server {
  /** `tls`: { cert, key } to serve https; `args`: more flags of `delayq serve`. */
  static async start({ tls, args = [] } = {}) {
    const s = new Server();
    s.extra = args;
    s.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'delayq-node-'));
    s.tls = tls;
    s.redisPort = await freePort();
    s.redis = spawn('redis-server', ['--port', String(s.redisPort), '--bind', '127.0.0.1', '--save', '',
      '--appendonly', 'no', '--dir', s.dir], { stdio: 'ignore' });
    s.port = await freePort();
    s.url = `${tls ? 'https' : 'http'}://127.0.0.1:${s.port}`;
    await s.startNode();
    return s;
  }

  async startNode() {
    const bin = process.env.DELAYQ_BIN ?? path.join(ROOT, 'target', 'debug', 'delayq');
    const log = fs.openSync(path.join(this.dir, 'node.log'), 'a');
    const args = ['serve', '--bind', `127.0.0.1:${this.port}`, '--redis-url', `redis://127.0.0.1:${this.redisPort}/0`,
      '--database-url', `sqlite://${this.dir}/journal.db`, '--shards', '2'];
    if (this.tls) args.push('--tls-cert', this.tls.cert, '--tls-key', this.tls.key);
    args.push(...this.extra);
    this.node = spawn(bin, args, { stdio: ['ignore', log, log] });
    fs.closeSync(log);
    const exited = new Promise((r) => this.node.once('exit', r));
    this.nodeExited = exited;
    const ready = await until(async () => {
      if (this.node.exitCode !== null) return true;
      return this.probe();
    }, 30000);
    if (!ready || this.node.exitCode !== null) {
      throw new Error(`delayq did not get ready; see ${path.join(this.dir, 'node.log')}`);
    }
  }

  // GET /ready answered 200 (the certificate is not checked here: this
  // only asks whether the node is up).
  probe() {
    const get = this.tls ? https.get : http.get;
    return new Promise((resolve) => {
      const req = get(`${this.url}/ready`, { rejectUnauthorized: false, timeout: 1000 }, (res) => {
        res.resume();
        resolve(res.statusCode === 200);
      });
      req.on('timeout', () => req.destroy());
      req.on('error', () => resolve(false));
    });
  }

  async stopNode() {
    this.node.kill('SIGTERM');
    await this.nodeExited;
  }

  async close() {
    for (const p of [this.node, this.redis]) {
      if (p && p.exitCode === null && p.signalCode === null) {
        const gone = new Promise((r) => p.once('exit', r));
        p.kill('SIGKILL');
        await gone;
      }
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
