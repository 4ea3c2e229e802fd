// The command-line options of the bench scripts run by hand (`--name value`): one reader for all.

/** `--name <value>` as given, or `fallback` when the option is absent. */
export function textArg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? fallback : process.argv[i + 1]!;
}

/** `--name <n>`: a positive whole number (`fallback` when absent); anything else stops the script. */
export function countArg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0) return fallback;
  const v = Number(process.argv[i + 1]);
  if (!Number.isInteger(v) || v <= 0) throw new Error(`--${name} needs a positive whole number`);
  return v;
}
