// CPU time, read from /proc (Linux): the whole machine's busy time and one process's
// (all its threads), in core-seconds. The PostgreSQL bench uses them to tell what a phase
// cost the server and what it cost this process, and so what any job doing the same work
// needs at the least on this machine's cores.
import { readFileSync } from "node:fs";

/** Clock ticks per second of /proc's figures (USER_HZ; 100 on Linux). */
const HZ = 100;

/**
 * Core-seconds the machine's CPUs spent busy since boot: user, nice, system, irq and
 * softirq (not idle, iowait, steal — time the hypervisor gave to others — nor guest,
 * which user already counts).
 */
export function machineBusy(): number {
  const f = readFileSync("/proc/stat", "utf8").split("\n", 1)[0]!.trim().split(/\s+/).slice(1).map(Number);
  return (f[0]! + f[1]! + f[2]! + f[5]! + f[6]!) / HZ;
}

/** Core-seconds process `pid` (all its threads) has run, user and system. */
export function processCpu(pid: number | "self" = "self"): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // The command name may hold spaces: the fields after it start after its ')'.
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) / HZ;
}

/** A phase's CPU: the machine's busy core-seconds and this process's part of them. */
export function cpuMeter(): () => { machine: number; own: number } {
  const m0 = machineBusy();
  const o0 = processCpu();
  return () => ({ machine: +(machineBusy() - m0).toFixed(2), own: +(processCpu() - o0).toFixed(2) });
}
