/**
 * A real nginx load balancer for tests (Debian's `nginx`, installed by scripts/setup.sh) in front of
 * kiln replicas: a generated configuration in a new temporary directory (pid, logs and temp files
 * inside it), round robin over the replicas, HTTP/1.1 with keep-alive to them, and no buffering so
 * server-sent events reach the client as they are written.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./free-port.js";
import { startBackground, waitForPort } from "./process.js";

export interface RunningNginx {
  /** `http://127.0.0.1:<port>`. */
  url: string;
  port: number;
  /** Stops nginx and removes its directory. */
  stop(): Promise<void>;
}

export interface NginxOptions {
  /** nginx worker processes. Default: 1. */
  workers?: number;
}

export async function startNginx(upstreamPorts: number[], options: NginxOptions = {}): Promise<RunningNginx> {
  const dir = mkdtempSync(join(tmpdir(), "kiln-nginx-"));
  const port = await freePort();
  writeFileSync(join(dir, "nginx.conf"), nginxConfig(dir, port, upstreamPorts, options.workers ?? 1));
  const server = startBackground(["nginx", "-p", dir, "-c", join(dir, "nginx.conf"), "-e", join(dir, "error.log")], { cwd: dir });
  const stop = async () => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitForPort(port, () => server.child.exitCode === null);
  } catch (error) {
    await stop();
    throw new Error(`${(error as Error).message}\n${server.output()}`);
  }
  return { url: `http://127.0.0.1:${port}`, port, stop };
}

export function nginxConfig(dir: string, port: number, upstreamPorts: number[], workers: number): string {
  // As root, workers would otherwise run as `nobody` and could not write the temp paths in `dir`.
  const user = process.getuid?.() === 0 ? "user root;" : "";
  return `${user}
daemon off;
worker_processes ${workers};
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/client_body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  upstream kiln {
${upstreamPorts.map((p) => `    server 127.0.0.1:${p};`).join("\n")}
    keepalive 64;
  }
  server {
    listen 127.0.0.1:${port};
    client_max_body_size 32m;
    location / {
      proxy_pass http://kiln;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 300s;
    }
  }
}
`;
}
