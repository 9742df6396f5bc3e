#!/usr/bin/env python3
"""Checks deskboxd's OpenAPI document, and HTTP exchanges recorded by the API tests against it.

Usage: python3 tests/api/openapi_validate.py OPENAPI_JSON [RECORDS_JSONL]

Without records: the document itself (openapi 3.1.0, $refs resolve, every operation has
responses, path template parameters are declared, operationIds are unique).
With records (JSON lines {"method", "target", "request_content_type", "request_body", "status",
"content_type", "body"}): every exchange must match a documented operation whose responses list
its status (or `default`); JSON answers must validate against the documented schema, and the
request bodies of 2xx exchanges against the documented request schema. Answers to unknown
paths or methods are allowed only with status 404 or 405. Exit status 1 on any failure, or when
the records file holds no records. Python standard library only.
"""
import json
import os
import math
import re
import sys
from collections import Counter
from urllib.parse import unquote, urlsplit

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


class Doc:
    def __init__(self, doc):
        self.doc = doc

    def resolve(self, ref):
        if not ref.startswith("#/"):
            raise KeyError(f"external $ref not supported: {ref}")
        node = self.doc
        for part in ref[2:].split("/"):
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(node, list):
                node = node[int(part)]
            elif isinstance(node, dict) and part in node:
                node = node[part]
            else:
                raise KeyError(f"unresolvable $ref: {ref}")
        return node

    def deref(self, node, depth=0):
        """An object with $ref (responses, parameters, request bodies) -> its target."""
        while isinstance(node, dict) and "$ref" in node and depth < 50:
            node = self.resolve(node["$ref"])
            depth += 1
        return node


# ---- the JSON Schema subset ----

def type_name(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def is_type(value, t):
    actual = type_name(value)
    if t == "number":
        return actual in ("integer", "number")
    if t == "integer":
        return actual == "integer" or (actual == "number" and math.isfinite(value) and value == int(value))
    return actual == t


def json_equal(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def pointer(path):
    out = "$"
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p) else f"[{json.dumps(p)}]")
    return out


class Validator:
    def __init__(self, doc):
        self.doc = doc

    def errors(self, value, schema, path=(), depth=0):
        """A list of (json path, message); empty when the value is valid."""
        if depth > 100:
            return [(pointer(path), "schema recursion too deep")]
        if schema is True or schema == {}:
            return []
        if schema is False:
            return [(pointer(path), "no value is allowed here")]
        if not isinstance(schema, dict):
            return [(pointer(path), f"bad schema {schema!r}")]
        errs = []
        here = pointer(path)
        if "$ref" in schema:
            errs += self.errors(value, self.doc.resolve(schema["$ref"]), path, depth + 1)
        if "type" in schema:
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if not any(is_type(value, t) for t in types):
                return errs + [(here, f"expected {' or '.join(types)}, got {type_name(value)}")]
        if "const" in schema and not json_equal(value, schema["const"]):
            errs.append((here, f"expected {json.dumps(schema['const'])}, got {json.dumps(value)[:80]}"))
        if "enum" in schema and not any(json_equal(value, e) for e in schema["enum"]):
            errs.append((here, f"{json.dumps(value)[:80]} is not one of {json.dumps(schema['enum'])}"))
        if is_type(value, "number") and not isinstance(value, bool):
            if "minimum" in schema and value < schema["minimum"]:
                errs.append((here, f"{value} < minimum {schema['minimum']}"))
            if "maximum" in schema and value > schema["maximum"]:
                errs.append((here, f"{value} > maximum {schema['maximum']}"))
            if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
                errs.append((here, f"{value} <= exclusiveMinimum {schema['exclusiveMinimum']}"))
            if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
                errs.append((here, f"{value} >= exclusiveMaximum {schema['exclusiveMaximum']}"))
        if isinstance(value, str):
            if "minLength" in schema and len(value) < schema["minLength"]:
                errs.append((here, f"shorter than {schema['minLength']}"))
            if "maxLength" in schema and len(value) > schema["maxLength"]:
                errs.append((here, f"longer than {schema['maxLength']}"))
            if "pattern" in schema and not re.search(schema["pattern"], value):
                errs.append((here, f"{json.dumps(value)[:80]} does not match {schema['pattern']}"))
        if isinstance(value, list):
            if "minItems" in schema and len(value) < schema["minItems"]:
                errs.append((here, f"{len(value)} items, at least {schema['minItems']} expected"))
            if "maxItems" in schema and len(value) > schema["maxItems"]:
                errs.append((here, f"{len(value)} items, at most {schema['maxItems']} expected"))
            prefix = schema.get("prefixItems", [])
            for i, item in enumerate(value):
                if i < len(prefix):
                    errs += self.errors(item, prefix[i], path + (i,), depth + 1)
                elif "items" in schema:
                    errs += self.errors(item, schema["items"], path + (i,), depth + 1)
        if isinstance(value, dict):
            if "minProperties" in schema and len(value) < schema["minProperties"]:
                errs.append((here, f"fewer than {schema['minProperties']} properties"))
            if "maxProperties" in schema and len(value) > schema["maxProperties"]:
                errs.append((here, f"more than {schema['maxProperties']} properties"))
            for name in schema.get("required", []):
                if name not in value:
                    errs.append((here, f"required property {name!r} is missing"))
            props = schema.get("properties", {})
            for name, item in value.items():
                if name in props:
                    errs += self.errors(item, props[name], path + (name,), depth + 1)
                elif "additionalProperties" in schema:
                    extra = schema["additionalProperties"]
                    if extra is False:
                        errs.append((pointer(path + (name,)), "additional property not allowed"))
                    else:
                        errs += self.errors(item, extra, path + (name,), depth + 1)
        for sub in schema.get("allOf", []):
            errs += self.errors(value, sub, path, depth + 1)
        if "anyOf" in schema:
            results = [self.errors(value, sub, path, depth + 1) for sub in schema["anyOf"]]
            if all(results):
                errs += self.best(results, here, "anyOf: no alternative matches")
        if "oneOf" in schema:
            results = [self.errors(value, sub, path, depth + 1) for sub in schema["oneOf"]]
            matched = sum(1 for r in results if not r)
            if matched == 0:
                errs += self.best(results, here, "oneOf: no alternative matches")
            elif matched > 1:
                errs.append((here, f"oneOf: {matched} alternatives match, exactly 1 expected"))
        if "not" in schema and not self.errors(value, schema["not"], path, depth + 1):
            errs.append((here, "matches a schema it must not"))
        return errs

    @staticmethod
    def best(results, here, message):
        # The alternative that got furthest (fewest, deepest errors) explains the mismatch best.
        closest = min(results, key=lambda r: (len(r), -max(len(p) for p, _ in r)))
        return [(here, message)] + [(p, f"(closest alternative) {m}") for p, m in closest[:3]]


# ---- checking the document ----

def walk_refs(node, where="#"):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield where, v
            else:
                yield from walk_refs(v, f"{where}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk_refs(v, f"{where}/{i}")


def operations(doc):
    for path, item in doc.get("paths", {}).items():
        for method in METHODS:
            if method in item:
                yield path, method, item[method]


def check_document(d):
    doc = d.doc
    problems = []
    if doc.get("openapi") != "3.1.0":
        problems.append(f"openapi is {doc.get('openapi')!r}, expected \"3.1.0\"")
    for where, ref in walk_refs(doc):
        try:
            d.resolve(ref)
        except (KeyError, ValueError, IndexError) as e:
            problems.append(f"{where}: {e}")
    schemes = doc.get("components", {}).get("securitySchemes", {})
    for requirement in doc.get("security", []):
        for scheme in requirement:
            if scheme not in schemes:
                problems.append(f"top-level security: no securityScheme {scheme!r}")
    seen = {}
    for path, method, op in operations(doc):
        name = f"{method.upper()} {path}"
        for requirement in op.get("security", []):
            for scheme in requirement:
                if scheme not in schemes:
                    problems.append(f"{name}: no securityScheme {scheme!r}")
        if not isinstance(op.get("responses"), dict) or not op["responses"]:
            problems.append(f"{name}: no responses")
        opid = op.get("operationId")
        if not opid:
            problems.append(f"{name}: no operationId")
        elif opid in seen:
            problems.append(f"{name}: operationId {opid!r} also used by {seen[opid]}")
        else:
            seen[opid] = name
        declared = set()
        for p in doc["paths"][path].get("parameters", []) + op.get("parameters", []):
            try:
                p = d.deref(p)
            except KeyError:
                continue  # reported as an unresolvable $ref
            if p.get("in") == "path":
                declared.add(p.get("name"))
                if p.get("required") is not True:
                    problems.append(f"{name}: path parameter {p.get('name')!r} must be required")
        for template in re.findall(r"\{([^}]+)\}", path):
            if template not in declared:
                problems.append(f"{name}: path parameter {{{template}}} is not declared")
        for extra in declared - set(re.findall(r"\{([^}]+)\}", path)):
            problems.append(f"{name}: path parameter {extra!r} is not in the path")
    return problems


# ---- matching records ----

def compile_templates(doc):
    out = []
    for path in doc.get("paths", {}):
        parts = [p for p in path.split("/")[1:]]
        regex = ""
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if part == "{path}" and last:
                regex += "(?:/.*)?"  # the rest: absent, empty or deeper, like the router
            elif part.startswith("{") and part.endswith("}"):
                regex += "/[^/]+"
            else:
                regex += "/" + re.escape(part)
        if path == "/":
            regex = "/"
        # Literal segments before variables: more specific templates win.
        score = (sum(1 for p in parts if not p.startswith("{")), len(parts))
        out.append((score, re.compile("^" + regex + "$"), path))
    out.sort(key=lambda t: t[0], reverse=True)
    return out


def match_path(templates, raw_path):
    path = unquote(raw_path)
    if path == "/index.html":
        path = "/"
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]  # the router ignores one trailing slash
    for _, regex, template in templates:
        if regex.match(path):
            return template
    return None


def media_schema(content, content_type):
    """The schema of the documented media type matching the answer's content type."""
    if not content:
        return None, False
    base = (content_type or "").split(";")[0].strip().lower()
    if base in content:
        return content[base].get("schema"), True
    for name, media in content.items():
        if name.endswith("/*") and base.startswith(name[:-1]):
            return media.get("schema"), True
        if name == "*/*":
            return media.get("schema"), True
    return None, False


def is_json(content_type):
    base = (content_type or "").split(";")[0].strip().lower()
    return base == "application/json" or base.endswith("+json")


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        raw = f.read()
    try:
        d = Doc(json.loads(raw))
    except json.JSONDecodeError as e:
        print(f"FAIL {argv[1]}: not valid JSON: {e}")
        return 1
    problems = check_document(d)
    ops = list(operations(d.doc))
    print(f"{argv[1]}: {len(d.doc.get('paths', {}))} paths, {len(ops)} operations")
    for p in problems:
        print(f"FAIL document: {p}")
    if len(argv) == 2:
        if not problems:
            print("document OK")
        return 1 if problems else 0

    v = Validator(d)
    templates = compile_templates(d.doc)
    failures = []
    counts = Counter()
    unmatched = Counter()
    records = 0
    if not os.path.exists(argv[2]):
        print(f"FAIL: no records at {argv[2]}: the API tests (api_tests) write them; run those first")
        return 1
    with open(argv[2], encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                method = str(rec["method"]).lower()
                target = str(rec["target"])
                status = int(rec["status"])
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                failures.append((lineno, line.strip()[:200], "$", f"not a record: {e}"))
                continue
            records += 1
            short = f"{method.upper()} {target[:160]} -> {status}"

            def fail(where, message):
                failures.append((lineno, short, where, message))

            template = match_path(templates, urlsplit(target).path)
            body = rec.get("body")
            item = d.doc["paths"].get(template) if template else None
            no_endpoint = (status == 404 and isinstance(body, dict) and isinstance(body.get("error"), dict)
                           and str(body["error"].get("message", "")).startswith("no such endpoint"))
            if item is None or method not in item or no_endpoint:
                if no_endpoint:
                    why = "404 no such endpoint"
                elif item is None:
                    why = "no such path"
                else:
                    why = f"{method.upper()} not documented on {template}"
                unmatched[why] += 1
                if status not in (404, 405):
                    fail("$", f"{why}, but the answer is {status} (only 404/405 are allowed)")
                elif isinstance(body, dict) and is_json(rec.get("content_type")):
                    # /mcp's clients read JSON-RPC: its refusals are JSON-RPC errors too.
                    shape = "JsonRpcMessage" if template == "/mcp" else "Error"
                    for p, m in v.errors(body, {"$ref": f"#/components/schemas/{shape}"}):
                        fail(p, f"error answer: {m}")
                continue
            op = item[method]
            counts[f"{method.upper()} {template}"] += 1
            responses = op.get("responses", {})
            response = responses.get(str(status)) or responses.get(f"{str(status)[0]}XX") or responses.get("default")
            if response is None:
                fail("$", f"status {status} is not documented (documented: {', '.join(responses)})")
                continue
            response = d.deref(response)
            if rec.get("content_type") and is_json(rec["content_type"]) and method != "head":
                schema, found = media_schema(response.get("content"), rec["content_type"])
                if response.get("content") and not found:
                    fail("$", f"content type {rec['content_type']} is not documented for {status} (documented: {', '.join(response['content'])})")
                elif schema is not None:
                    if body is None:
                        fail("$", "JSON answer without a parsed body")
                    else:
                        for p, m in v.errors(body, schema):
                            fail(p, m)
            elif response.get("content") and rec.get("content_type") and method != "head":
                _, found = media_schema(response["content"], rec["content_type"])
                if not found:
                    fail("$", f"content type {rec['content_type']} is not documented for {status} (documented: {', '.join(response['content'])})")
            if 200 <= status < 300 and rec.get("request_body") is not None:
                rb = d.deref(op.get("requestBody")) if op.get("requestBody") else None
                if rb is None:
                    fail("request", "a request body was sent, but the operation documents none")
                else:
                    schema, found = media_schema(rb.get("content"), rec.get("request_content_type") or "application/json")
                    if not found:
                        schema, found = media_schema(rb.get("content"), "application/json")
                    if schema is not None and found:
                        for p, m in v.errors(rec["request_body"], schema):
                            fail("request" + p[1:], m)

    print(f"records checked: {records}")
    for name, n in sorted(counts.items()):
        print(f"  {n:5d}  {name}")
    for name, n in sorted(unmatched.items()):
        print(f"  {n:5d}  (unmatched) {name}")
    exercised = set(counts)
    missing = [f"{m.upper()} {p}" for p, m, _ in ops if f"{m.upper()} {p}" not in exercised]
    if missing:
        print(f"operations no record exercised ({len(missing)}, informational):")
        for name in missing:
            print(f"         {name}")
    for lineno, rec, where, message in failures:
        print(f"FAIL line {lineno}: {rec}: {where}: {message}")
    if records == 0:
        print(f"FAIL {argv[2]}: no records")
    ok = not problems and not failures and records > 0
    print("OK" if ok else f"{len(failures) + len(problems) + (records == 0)} failure(s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
