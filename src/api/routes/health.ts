/**
 * GET /health (503 until the models are loaded, and while draining), GET /version and GET /metrics (Prometheus).
 * In cloud mode /metrics asks for a valid API key like /v1 does: its series name the served
 * models and their load. /health stays open, for probes.
 */
import type { FastifyInstance } from "fastify";
import { kilnVersion } from "../../catalogue/version.js";
import { authHook, checksKeys, type AuthMode } from "../auth/auth.js";
import type { ApiContext } from "../context.js";
import { engineSnapshots } from "../metrics/engine-metrics.js";
import { renderDeviceInfo } from "../metrics/device-metrics.js";
import { PROMETHEUS_CONTENT_TYPE } from "../metrics/prometheus.js";

export function healthRoutes(app: FastifyInstance, ctx: ApiContext, auth: AuthMode): void {
  app.get("/health", async (_request, reply) => {
    const models = Object.fromEntries(ctx.models.all().map((s) => [s.slug, s.status === "loading" ? `loading (${s.stage})` : s.status]));
    const status = ctx.lifecycle.draining ? "draining" : ctx.models.ready ? "ok" : "loading";
    const warnings = ctx.warnings.length > 0 ? { warnings: ctx.warnings } : {};
    const { device, adapter, software } = ctx.device;
    return reply.code(status === "ok" ? 200 : 503).send({ status, models, device: { name: device, adapter, software }, ...warnings });
  });

  // vLLM's: which server and version answers, for clients that check before they call.
  app.get("/version", async () => ({ version: kilnVersion(), server: "kiln" }));

  app.get("/metrics", { onRequest: checksKeys(auth) ? authHook(auth) : [] }, async (_request, reply) =>
    reply.type(PROMETHEUS_CONTENT_TYPE).send(ctx.metrics.render(() => engineSnapshots(ctx.models)) + renderDeviceInfo(ctx.device)),
  );
}
