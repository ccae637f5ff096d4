/**
 * Who can reach the server. Local mode without shared keys takes any key, which is safe only where
 * nobody else can connect: a server listening beyond loopback without `--cloud` or `--api-key` is
 * open to its whole network.
 */
import { isIP } from "node:net";

/** Whether `host` (an address or name to listen on) is reachable only from this machine: 127.0.0.0/8, ::1 or localhost. */
export function isLoopbackHost(host: string): boolean {
  const name = host
    .trim()
    .toLowerCase()
    .replace(/^\[(.*)\]$/, "$1");
  if (name === "localhost") return true;
  const v4 = name.startsWith("::ffff:") && isIP(name.slice(7)) === 4 ? name.slice(7) : name;
  if (isIP(v4) === 4) return v4.split(".")[0] === "127";
  if (isIP(name) === 6) return isIpv6Loopback(name);
  return false;
}

/** ::1 in any of its spellings (0:0:0:0:0:0:0:1, ::0:1, …). */
function isIpv6Loopback(address: string): boolean {
  const [head, tail = ""] = address.split("::");
  const groups = (part: string) => (part === "" ? [] : part.split(":").map((g) => parseInt(g, 16)));
  const given = address.includes("::") ? [...groups(head), ...groups(tail)] : groups(address);
  return given.at(-1) === 1 && given.slice(0, -1).every((g) => g === 0);
}

/** The warning for a server that takes any key from beyond this machine (`checksKeys`: whether it checks them), or null when it is not exposed that way. */
export function exposureWarning(host: string, checksKeys: boolean): string | null {
  if (checksKeys || isLoopbackHost(host)) return null;
  return (
    `listening on ${host} in local mode: ANY API key is accepted from ANY machine that can reach this address, ` +
    "so anyone on the network can use the models. Use --api-key <key>, --cloud (keys from `kiln keys`) or --host 127.0.0.1."
  );
}
