/** `kiln_device_info`: which device and adapter this server's models run on, as an info gauge (always 1). */
import type { ServerDevice } from "../device.js";
import { escapeLabel, series } from "./prometheus.js";

export function renderDeviceInfo({ device, adapter, software }: ServerDevice): string {
  const labels = `adapter="${escapeLabel(adapter ?? "")}",device="${device}",software="${software}"`;
  return (
    "# HELP kiln_device_info The device the models run on (cpu or webgpu) and its WebGPU adapter (empty on the CPU); software is true for an adapter on the CPU such as lavapipe.\n" +
    "# TYPE kiln_device_info gauge\n" +
    `${series("kiln_device_info", labels, 1)}\n`
  );
}
