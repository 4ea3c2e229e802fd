// Literals for ClickHouse SQL. ClickHouse 18.16 has no server-side query parameters ({name:Type}
// arrived in 19.x), so values are formatted here, and only here, with strict typing.

export function chStr(s: string): string {
  return `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

export function chInt(n: number): string {
  if (!Number.isInteger(n)) throw new Error(`not an integer: ${n}`);
  return String(n);
}
