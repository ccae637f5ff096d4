/** GET /health (503 until the models are loaded, and while draining) and GET /metrics (Prometheus). */
import type { FastifyInstance } from "fastify";
import type { ApiContext } from "../context.js";
import { engineSnapshots } from "../metrics/engine-metrics.js";
import { PROMETHEUS_CONTENT_TYPE } from "../metrics/prometheus.js";

export function healthRoutes(app: FastifyInstance, ctx: ApiContext): void {
  app.get("/health", async (_request, reply) => {
    const models = Object.fromEntries(ctx.models.all().map((s) => [s.slug, s.status === "loading" ? `loading (${s.stage})` : s.status]));
    const status = ctx.lifecycle.draining ? "draining" : ctx.models.ready ? "ok" : "loading";
    return reply.code(status === "ok" ? 200 : 503).send({ status, models });
  });

  app.get("/metrics", async (_request, reply) =>
    reply.type(PROMETHEUS_CONTENT_TYPE).send(ctx.metrics.render(() => engineSnapshots(ctx.models))),
  );
}
