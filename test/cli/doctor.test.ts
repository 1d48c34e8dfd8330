import { writeFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { type AddressInfo, createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it, onTestFinished } from 'vitest';
import { cliNodeArgs } from '../helpers/cli-command.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

async function doctorIn(project: string, yaml: string) {
  writeFileSync(join(project, 'metis.config.yaml'), yaml);
  const result = await execa(process.execPath, [...cliNodeArgs(), 'doctor', '--json'], {
    cwd: project,
    reject: false,
    stdin: 'ignore',
    env: { METIS_HOME: tempDir(), NO_COLOR: '1', ANTHROPIC_API_KEY: '', OPENAI_API_KEY: '' },
  });
  if (String(result.stdout) === '')
    throw new Error(
      `doctor printed nothing (exit ${result.exitCode}, signal ${result.signal}); stderr: ${String(result.stderr)}`,
    );
  const report = JSON.parse(String(result.stdout)) as {
    ok: boolean;
    checks: { name: string; status: string; detail: string; hint?: string }[];
  };
  const byName = Object.fromEntries(report.checks.map((c) => [c.name, c]));
  return { exitCode: result.exitCode, report, byName };
}

/** A port held by something that is not metis. */
async function occupiedPort(): Promise<number> {
  const server: Server = createServer((socket) => socket.destroy());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return (server.address() as { port: number }).port;
}

describe('metis doctor (issue 17)', () => {
  it('a ready machine: exit 0, keys of unused providers only warned about', async () => {
    const { exitCode, report, byName } = await doctorIn(tempDir(), 'server:\n  port: 0\n');
    expect(exitCode).toBe(0);
    expect(report.ok).toBe(true);
    expect(byName.config!.status).toBe('ok');
    expect(byName.database!.status).toBe('ok');
    expect(byName.port!.status).toBe('ok');
    expect(byName['provider anthropic']).toMatchObject({
      status: 'warn',
      detail: expect.stringContaining('$ANTHROPIC_API_KEY'),
    });
  }, 30_000);

  it('problems that would stop metis serve: a busy port, an unreachable default provider; exit 1', async () => {
    const port = await occupiedPort();
    const yaml = [
      `server:\n  port: ${port}`,
      'runtime:',
      '  default_model: local:llama',
      '  providers:',
      '    local: { kind: openai-compatible, base_url: "http://127.0.0.1:9/v1" }',
    ].join('\n');
    const { exitCode, report, byName } = await doctorIn(tempDir(), `${yaml}\n`);
    expect(exitCode).toBe(1);
    expect(report.ok).toBe(false);
    expect(byName.port).toMatchObject({
      status: 'problem',
      detail: `127.0.0.1:${port} is in use by another program`,
    });
    expect(byName['provider local']).toMatchObject({
      status: 'problem',
      detail: expect.stringContaining('http://127.0.0.1:9/v1 does not answer'),
    });
  }, 30_000);

  it('a port held by a metis server is fine; a broken config is a problem', async () => {
    const t = await startTestServer();
    const running = await doctorIn(tempDir(), `server:\n  port: ${t.server.port}\n`);
    expect(running.byName.port).toMatchObject({
      status: 'ok',
      detail: `a metis server already runs at ${t.url}`,
    });
    const broken = await doctorIn(tempDir(), 'server:\n  prot: 1\n');
    expect(broken.exitCode).toBe(1);
    expect(broken.byName.config).toMatchObject({
      status: 'problem',
      detail: expect.stringContaining('prot'),
    });
  }, 30_000);

  it("probes the otel plugin's OTLP endpoint with an empty export: ok when it takes it, a warning naming it when it does not (issue 29)", async () => {
    const exports: string[] = [];
    const collector = createHttpServer((request, response) => {
      let body = '';
      request.on('data', (chunk: Buffer) => {
        body += chunk.toString();
      });
      request.on('end', () => {
        exports.push(`${request.method} ${request.url} ${request.headers.authorization} ${body}`);
        response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
    onTestFinished(() => new Promise<void>((resolve) => collector.close(() => resolve())));
    const endpoint = `http://127.0.0.1:${(collector.address() as AddressInfo).port}/v1/traces`;
    const plugin = (url: string) =>
      `server:\n  port: 0\nplugins:\n  - [otel, { endpoint: "${url}", headers: { authorization: "Bearer k" } }]\n`;

    const up = await doctorIn(tempDir(), plugin(endpoint));
    expect(up.byName['otel endpoint']).toMatchObject({
      status: 'ok',
      detail: expect.stringContaining(endpoint),
    });
    expect(exports).toEqual([`POST /v1/traces Bearer k {"resourceSpans":[]}`]);
    expect(up.exitCode).toBe(0);

    const closed = `http://127.0.0.1:${await closedPort()}/v1/traces`;
    const down = await doctorIn(tempDir(), plugin(closed));
    expect(down.byName['otel endpoint']).toMatchObject({
      status: 'warn',
      detail: expect.stringMatching(
        new RegExp(`^${closed.replaceAll('.', '\\.')} does not answer \\(ECONNREFUSED\\)`),
      ),
    });

    // Without the plugin there is nothing to probe.
    const none = await doctorIn(tempDir(), 'server:\n  port: 0\n');
    expect(none.byName['otel endpoint']).toBeUndefined();
  }, 30_000);
});

/** A port nothing listens on: taken, then given back. */
async function closedPort(): Promise<number> {
  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
