// A small validator for the JSON-Schema subset protocol/native-messaging.schema.json
// uses (the same subset gen-protocol.mjs understands), so tests can check that
// fixtures and recorded host output follow the contract without a dependency.
// validate(schema, value, ref?: def name | subschema) returns a list of "pointer: problem" strings.

function typeMatches(type, value) {
  switch (type) {
    case "null": return value === null;
    case "boolean": return typeof value === "boolean";
    case "string": return typeof value === "string";
    case "number": return typeof value === "number" && Number.isFinite(value);
    case "integer": return Number.isInteger(value);
    case "array": return Array.isArray(value);
    case "object": return typeof value === "object" && value !== null && !Array.isArray(value);
    default: throw new Error(`schema-check: unsupported type ${type}`);
  }
}

export function validate(root, value, ref = null) {
  const errors = [];
  const resolve = (r) => {
    const m = /^#\/\$defs\/(.+)$/.exec(r);
    if (!m || !root.$defs?.[m[1]]) throw new Error(`schema-check: unresolved ${r}`);
    return root.$defs[m[1]];
  };
  const check = (schema, v, at) => {
    if (schema === true || schema === undefined) return;
    if (schema.$ref) return check(resolve(schema.$ref), v, at);
    if ("const" in schema && JSON.stringify(schema.const) !== JSON.stringify(v)) errors.push(`${at}: expected ${JSON.stringify(schema.const)}`);
    if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) errors.push(`${at}: ${JSON.stringify(v)} not in ${JSON.stringify(schema.enum)}`);
    const union = schema.oneOf ?? schema.anyOf;
    if (union) {
      const results = union.map((s) => {
        const before = errors.length;
        check(s, v, at);
        return errors.splice(before);
      });
      const passing = results.filter((r) => r.length === 0).length;
      if (schema.oneOf && passing !== 1) {
        errors.push(passing === 0
          ? `${at}: matches none of oneOf (${results.map((r) => r[0]).join(" | ")})`
          : `${at}: matches ${passing} branches of oneOf`);
      } else if (schema.anyOf && passing === 0) errors.push(`${at}: matches none of anyOf`);
    }
    if (schema.type) {
      const types = Array.isArray(schema.type) ? schema.type : [schema.type];
      if (!types.some((t) => typeMatches(t, v))) {
        errors.push(`${at}: expected ${types.join("|")}, got ${v === null ? "null" : typeof v}`);
        return;
      }
    }
    if (typeof v === "number") {
      if (schema.minimum !== undefined && v < schema.minimum) errors.push(`${at}: below ${schema.minimum}`);
      if (schema.maximum !== undefined && v > schema.maximum) errors.push(`${at}: above ${schema.maximum}`);
    }
    if (typeof v === "string") {
      if (schema.minLength !== undefined && v.length < schema.minLength) errors.push(`${at}: shorter than ${schema.minLength}`);
    }
    if (Array.isArray(v)) {
      if (schema.maxItems !== undefined && v.length > schema.maxItems) errors.push(`${at}: more than ${schema.maxItems} items`);
      if (schema.minItems !== undefined && v.length < schema.minItems) errors.push(`${at}: fewer than ${schema.minItems} items`);
      if (schema.items) v.forEach((item, i) => check(schema.items, item, `${at}/${i}`));
    }
    if (typeMatches("object", v) && (schema.properties || schema.required || schema.additionalProperties !== undefined)) {
      const props = schema.properties ?? {};
      for (const name of schema.required ?? []) if (!(name in v)) errors.push(`${at}: missing ${name}`);
      for (const [name, child] of Object.entries(v)) {
        if (name in props) check(props[name], child, `${at}/${name}`);
        else if (schema.additionalProperties === false) errors.push(`${at}: unexpected property ${name}`);
        else if (typeof schema.additionalProperties === "object") check(schema.additionalProperties, child, `${at}/${name}`);
      }
    }
  };
  check(typeof ref === "string" ? { $ref: `#/$defs/${ref}` } : ref ?? root, value, "");
  return errors;
}

/** Checks a host message, and a successful reply's result against ResultByType[type]. */
export function validateHostMessage(root, message, requestType = null) {
  const errors = validate(root, message, "HostMessage");
  if (errors.length === 0 && message.ok === true && requestType) {
    errors.push(...validate(root, message.result, root.$defs.ResultByType.properties[requestType]).map((e) => `result${e}`));
  }
  return errors;
}
