"""Encoder generation: dict -> list of bytes chunks, straight-line code per message version."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from .codegen import Encoder, SourceBuilder, fixed_array
from .primitives import FIXED_FORMATS
from .schema import EntitySpec, FieldSpec

_DYNAMIC_CACHE_LIMIT = 4096


class _EncoderGen(SourceBuilder):
    def fetch(self, spec: EntitySpec, d: str, ind: int) -> dict[str, str]:
        """Bind every untagged field of dict `d` to a local. Dicts holding every key take the
        subscript fast path; otherwise `d` is first merged over the entity's defaults."""
        names = {f.name: self.var() for f in spec.fields}
        if not names:
            return names
        defaults = self.const({f.name: f.default for f in spec.fields}, "DK")
        self.emit(ind, f"if len({d}) < {len(names)}:")
        self.emit(ind + 1, f"{d} = {{**{defaults}, **{d}}}")
        self.emit(ind, "try:")
        for name, v in names.items():
            self.emit(ind + 1, f"{v} = {d}[{name!r}]")
        self.emit(ind, "except KeyError:")
        self.emit(ind + 1, f"{d} = {{**{defaults}, **{d}}}")
        for name, v in names.items():
            self.emit(ind + 1, f"{v} = {d}[{name!r}]")
        return names

    def entity(self, spec: EntitySpec, d: str, ap: str, ind: int) -> None:
        names = self.fetch(spec, d, ind)
        segments: list[list[FieldSpec]] = []
        for f in spec.fields:
            if f.fixed or fixed_array(f):
                if segments and (segments[-1][0].fixed or fixed_array(segments[-1][0])):
                    segments[-1].append(f)
                    continue
            segments.append([f])
        tail_byte = spec.flexible and not spec.tagged
        for i, seg in enumerate(segments):
            last = i == len(segments) - 1
            if seg[0].fixed or fixed_array(seg[0]):
                self.run(seg, names, ap, ind, spec.flexible, tail_byte and last)
                if tail_byte and last:
                    tail_byte = False
            else:
                self.value(seg[0], names[seg[0].name], ap, ind, spec.flexible)
        if tail_byte:
            self.emit(ind, f"{ap}(b'\\x00')")
        if spec.tagged:
            self.tagged(spec, d, ap, ind)

    @staticmethod
    def _scalar(f: FieldSpec, v: str) -> str:
        return f"_uuid({v})" if f.wire == "uuid" else v

    def run(
        self,
        fields: list[FieldSpec],
        names: dict[str, str],
        ap: str,
        ind: int,
        flexible: bool,
        tail: bool,
    ) -> None:
        arrays = [f for f in fields if f.array]
        if not arrays:
            fmt = ">" + "".join(FIXED_FORMATS[f.wire] for f in fields) + ("x" if tail else "")
            s = self.const(struct.Struct(fmt), "S")
            values = ", ".join(self._scalar(f, names[f.name]) for f in fields)
            self.emit(ind, f"{ap}({s}.pack({values}))")
            return
        # Dynamic run: one Struct per tuple of array lengths.
        counts: dict[str, str] = {}
        for f in arrays:
            a, c = names[f.name], self.var("c")
            counts[f.name] = c
            if f.nullable:
                self.emit(ind, f"{c} = -1 if {a} is None else len({a})")
            else:
                self.emit(ind, f"{c} = len({a})")
        key = (
            counts[arrays[0].name]
            if len(arrays) == 1
            else ("(" + ", ".join(counts[f.name] for f in arrays) + ")")
        )
        cache: dict[Any, Any] = {}
        parts = [("a" if f.array else "s", FIXED_FORMATS[f.wire]) for f in fields]
        cache_name = self.const(cache, "C")
        build = self.const(_run_builder(parts, flexible, tail, cache, len(arrays) == 1), "B")
        s = self.var("s")
        self.emit(ind, f"{s} = {cache_name}.get({key})")
        self.emit(ind, f"if {s} is None:")
        self.emit(ind + 1, f"{s} = {build}({key})")
        self.emit(ind, f"if {s}:")
        args: list[str] = []
        for f in fields:
            v = names[f.name]
            if not f.array:
                args.append(self._scalar(f, v))
                continue
            c = counts[f.name]
            args.append(f"{c} + 1" if flexible else c)
            args.append(f"*({v} or ())" if f.nullable else f"*{v}")
        self.emit(ind + 1, f"{ap}({s}.pack({', '.join(args)}))")
        self.emit(ind, "else:")
        for f in fields:
            if f.array:
                self.value(f, names[f.name], ap, ind + 1, flexible)
            else:
                self.item(f, names[f.name], ap, ind + 1, flexible)
        if tail:
            self.emit(ind + 1, f"{ap}(b'\\x00')")

    def _length(self, n: str, ap: str, ind: int, flexible: bool, classic: str) -> None:
        """Append the length prefix for `n` items/bytes (compact: n + 1 as uvarint)."""
        if flexible:
            t = self.var("t")
            self.emit(ind, f"{t} = {n} + 1")
            self.emit(ind, f"{ap}(_SUV[{t}] if {t} < 128 else _wuv({t}))")
        else:
            self.emit(ind, f"{ap}({classic}({n}))")

    def value(self, f: FieldSpec, v: str, ap: str, ind: int, flexible: bool) -> None:
        """Encode the value held in local `v` (already defaulted) for field `f`."""
        if f.array:
            if f.nullable:
                null = "b'\\x00'" if flexible else "b'\\xff\\xff\\xff\\xff'"
                self.emit(ind, f"if {v} is None:")
                self.emit(ind + 1, f"{ap}({null})")
                self.emit(ind, "else:")
                ind += 1
            n = self.var("n")
            self.emit(ind, f"{n} = len({v})")
            self._length(n, ap, ind, flexible, "_i32p")
            if fixed_array(f):
                ch = FIXED_FORMATS[f.wire]
                self.emit(ind, f"{ap}(_pack('>%d{ch}' % {n}, *{v}))")
                return
            e = self.var("e")
            self.emit(ind, f"for {e} in {v}:")
            self.item(f, e, ap, ind + 1, flexible)
            return
        if f.wire == "struct":
            assert f.entity is not None
            if f.nullable:
                self.emit(ind, f"if {v} is None:")
                self.emit(ind + 1, f"{ap}(b'\\xff')")
                self.emit(ind, "else:")
                self.emit(ind + 1, f"{ap}(b'\\x01')")
                self.entity(f.entity, v, ap, ind + 1)
            else:
                self.entity(f.entity, v, ap, ind)
            return
        self.item(f, v, ap, ind, flexible)

    def item(self, f: FieldSpec, v: str, ap: str, ind: int, flexible: bool) -> None:
        """Encode one scalar or one array element held in `v`."""
        wire = f.wire
        if wire == "struct":
            assert f.entity is not None
            self.entity(f.entity, v, ap, ind)
            return
        if wire == "uuid":
            self.emit(ind, f"{ap}(_uuid({v}))")
            return
        if wire in FIXED_FORMATS:
            s = self.const(struct.Struct(">" + FIXED_FORMATS[wire]), "S")
            self.emit(ind, f"{ap}({s}.pack({v}))")
            return
        nullable = f.nullable and not f.array
        is_str = wire == "string"
        if nullable:
            if flexible:
                null = "b'\\x00'"
            else:
                null = "b'\\xff\\xff'" if is_str else "b'\\xff\\xff\\xff\\xff'"
            self.emit(ind, f"if {v} is None:")
            self.emit(ind + 1, f"{ap}({null})")
            self.emit(ind, "else:")
            ind += 1
        b = self.var("b")
        n = self.var("n")
        self.emit(ind, f"{b} = {v}.encode()" if is_str else f"{b} = {v}")
        self.emit(ind, f"{n} = len({b})")
        self._length(n, ap, ind, flexible, "_i16p" if is_str else "_i32p")
        self.emit(ind, f"{ap}({b})")

    def tagged(self, spec: EntitySpec, d: str, ap: str, ind: int) -> None:
        tg = self.var("tg")
        self.emit(ind, f"{tg} = []")
        for f in spec.tagged:
            v = self.var()
            self.emit(ind, f"{v} = {d}.get({f.name!r}, _MISSING)")
            if f.array:
                if f.default is None:
                    cond = f"{v} is not _MISSING and {v} is not None"
                else:
                    differs = (
                        f"len({v}) != 0"
                        if f.default == []
                        else (f"list({v}) != {self.const(f.default, 'D')}")
                    )
                    null = f"{v} is None or " if f.nullable else ""
                    cond = f"{v} is not _MISSING and ({null}{differs})"
            elif f.wire == "struct" and isinstance(f.default, dict):
                dc = self.const(f.default, "D")
                cond = f"{v} is not _MISSING and {v} is not None and {{**{dc}, **{v}}} != {dc}"
            elif f.wire == "uuid":
                cond = f"{v} is not _MISSING and _uuid({v}) != _ZU"
            else:
                cond = f"{v} is not _MISSING and {v} != {self.lit(f.default)}"
            self.emit(ind, f"if {cond}:")
            sub, sap, data = self.var("sub"), self.var("sap"), self.var("data")
            self.emit(ind + 1, f"{sub} = []")
            self.emit(ind + 1, f"{sap} = {sub}.append")
            self.value(f, v, sap, ind + 1, True)
            self.emit(ind + 1, f"{data} = b''.join({sub})")
            self.emit(ind + 1, f"{tg}.append(_wuv({f.tag}) + _wuv(len({data})) + {data})")
        self.emit(ind, f"{ap}(_SUV[len({tg})])")
        self.emit(ind, f"{ap}(b''.join({tg}))")


def _run_builder(
    parts: list[tuple[str, str]], compact: bool, tail: bool, cache: dict[Any, Any], single: bool
) -> Callable[[Any], struct.Struct | bool]:
    """Build (and cache) the Struct of a dynamic run for one tuple of array lengths.

    Returns False when the lengths cannot use the packed path (compact count >= 128)."""

    def build(key: Any) -> struct.Struct | bool:
        counts = iter((key,) if single else key)
        fmt = [">"]
        for kind, ch in parts:
            if kind == "s":
                fmt.append(ch)
                continue
            count = next(counts)
            if compact:
                if count + 1 >= 128:
                    return False
                fmt.append("B")
            else:
                fmt.append("i")
            if count > 0:
                fmt.append(f"{count}{ch}")
        if tail:
            fmt.append("x")
        packer = struct.Struct("".join(fmt))
        if len(cache) < _DYNAMIC_CACHE_LIMIT:
            cache[key] = packer
        return packer

    return build


def generate_encoder(spec: EntitySpec) -> Encoder:
    g = _EncoderGen()
    g.emit(0, "def encode(d, out):")
    g.emit(1, "ap = out.append")
    g.entity(spec, "d", "ap", 1)
    fn: Encoder = g.compile("encode", f"encode {spec.name}")
    return fn
