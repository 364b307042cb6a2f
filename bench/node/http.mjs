// The plain keep-alive HTTP client the Node benchmarks use: one JSON
// request, its status and parsed body; and their `--key=value` flags.
import http from 'node:http';

export function requester(base, agent) {
  return function request(method, path, body) {
    return new Promise((resolve, reject) => {
      const data = body === undefined ? undefined : JSON.stringify(body);
      const req = http.request(
        {
          host: base.hostname,
          port: base.port,
          method,
          path,
          agent,
          headers: data ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } : {},
          timeout: 30000,
        },
        (res) => {
          const chunks = [];
          res.on('data', (c) => chunks.push(c));
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString();
            try {
              resolve({ status: res.statusCode, body: JSON.parse(text) });
            } catch (e) {
              reject(new Error(`${method} ${path}: ${res.statusCode} ${text.slice(0, 200)}`));
            }
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error(`${method} ${path}: timeout`)));
      req.on('error', reject);
      if (data) req.write(data);
      req.end();
    });
  };
}

// `--key=value` arguments as an object (`--flag` alone: 'true').
export function flags(argv) {
  return Object.fromEntries(
    argv.map((a) => {
      const [k, v] = a.replace(/^--/, '').split('=');
      return [k, v ?? 'true'];
    }),
  );
}
