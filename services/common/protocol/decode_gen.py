"""Decoder generation: buffer -> dict, with every length and count checked before use."""

from __future__ import annotations

import struct

from .codegen import Decoder, SourceBuilder, element_min, fixed_array
from .primitives import FIXED_FORMATS, FIXED_SIZES
from .schema import EntitySpec, FieldSpec


class _DecoderGen(SourceBuilder):
    def uvarint(self, target: str, ind: int) -> None:
        self.emit(ind, f"{target} = buf[pos]")
        self.emit(ind, "pos += 1")
        self.emit(ind, f"if {target} > 127:")
        self.emit(ind + 1, f"{target}, pos = _ruv(buf, pos - 1)")

    def fail(self, ind: int, message: str) -> None:
        self.emit(ind, f"raise DecodeError({message!r})")

    def entity(self, spec: EntitySpec, target: str, ind: int, label: str) -> None:
        names: dict[str, str] = {}
        run: list[FieldSpec] = []

        def flush() -> None:
            if not run:
                return
            s = struct.Struct(">" + "".join(FIXED_FORMATS[f.wire] for f in run))
            sname = self.const(s, "S")
            targets = [self.var() for _ in run]
            for f, t in zip(run, targets, strict=True):
                names[f.name] = t
            self.emit(ind, f"{', '.join(targets)}, = {sname}.unpack_from(buf, pos)")
            self.emit(ind, f"pos += {s.size}")
            run.clear()

        for f in spec.fields:
            if f.fixed:
                run.append(f)
                continue
            flush()
            v = self.var()
            names[f.name] = v
            self.value(f, v, ind, spec.flexible, f"{label}.{f.name}")
        flush()
        if spec.flexible:
            if spec.tagged:
                self.tagged(spec, names, ind, label)
            else:
                self.emit(ind, "if buf[pos]:")
                self.emit(ind + 1, "pos = _skip_tags(buf, pos, end)")
                self.emit(ind, "else:")
                self.emit(ind + 1, "pos += 1")
        items = ", ".join(f"{n!r}: {names[n]}" for n in spec.field_names)
        self.emit(ind, f"{target} = {{{items}}}")

    def _count(self, f: FieldSpec, n: str, ind: int, flexible: bool, label: str) -> None:
        """Read an array count into `n` and open its `if null:` branch (the caller fills it
        and continues under `else:`)."""
        if flexible:
            self.uvarint(n, ind)
            self.emit(ind, f"if {n} == 0:")
            if not f.nullable:
                self.fail(ind + 1, f"{label}: null for non-nullable array")
            return
        self.emit(ind, f"{n} = _i32u(buf, pos)[0]")
        self.emit(ind, "pos += 4")
        self.emit(ind, f"if {n} < 0:")
        if not f.nullable:
            self.fail(ind + 1, f"{label}: negative array length")
        else:
            self.emit(ind + 1, f"if {n} != -1:")
            self.fail(ind + 2, f"{label}: negative array length")

    def value(self, f: FieldSpec, v: str, ind: int, flexible: bool, label: str) -> None:
        if f.array:
            n = self.var("n")
            self._count(f, n, ind, flexible, label)
            if f.nullable:
                self.emit(ind + 1, f"{v} = None")
            self.emit(ind, "else:")
            ind += 1
            if flexible:
                self.emit(ind, f"{n} -= 1")
            elem = element_min(f, flexible)
            self.emit(ind, f"if {n} * {elem} > end - pos:")
            self.fail(ind + 1, f"{label}: array count exceeds remaining bytes")
            if fixed_array(f):
                ch = FIXED_FORMATS[f.wire]
                self.emit(ind, f"{v} = list(_unpack_from('>%d{ch}' % {n}, buf, pos))")
                self.emit(ind, f"pos += {n} * {FIXED_SIZES[f.wire]}")
                return
            ap = self.var("ap")
            self.emit(ind, f"{v} = []")
            self.emit(ind, f"{ap} = {v}.append")
            self.emit(ind, f"for _ in range({n}):")
            e = self.var("e")
            self.item(f, e, ind + 1, flexible, label)
            self.emit(ind + 1, f"{ap}({e})")
            return
        if f.wire == "struct" and f.nullable:
            assert f.entity is not None
            m = self.var("m")
            self.emit(ind, f"{m} = buf[pos]")
            self.emit(ind, "pos += 1")
            self.emit(ind, f"if {m} > 127:")  # negative int8 marker: null (KIP-893)
            self.emit(ind + 1, f"{v} = None")
            self.emit(ind, "else:")
            self.entity(f.entity, v, ind + 1, label)
            return
        self.item(f, v, ind, flexible, label, nullable=f.nullable)

    def item(
        self, f: FieldSpec, v: str, ind: int, flexible: bool, label: str, nullable: bool = False
    ) -> None:
        wire = f.wire
        if wire == "struct":
            assert f.entity is not None
            self.entity(f.entity, v, ind, label)
            return
        if wire == "uuid":
            self.emit(ind, f"{v} = bytes(mv[pos:pos + 16])")
            self.emit(ind, f"if len({v}) != 16:")
            self.fail(ind + 1, f"{label}: truncated uuid")
            self.emit(ind, "pos += 16")
            return
        if wire in FIXED_FORMATS:
            s = struct.Struct(">" + FIXED_FORMATS[wire])
            self.emit(ind, f"{v} = {self.const(s, 'S')}.unpack_from(buf, pos)[0]")
            self.emit(ind, f"pos += {s.size}")
            return
        n = self.var("n")
        is_str = wire == "string"
        if flexible:
            self.uvarint(n, ind)
            self.emit(ind, f"if {n} == 0:")
            if nullable:
                self.emit(ind + 1, f"{v} = None")
            else:
                self.fail(ind + 1, f"{label}: null for non-nullable field")
            self.emit(ind, "else:")
            self.emit(ind + 1, f"{n} -= 1")
        else:
            reader = "_i16u" if is_str else "_i32u"
            self.emit(ind, f"{n} = {reader}(buf, pos)[0]")
            self.emit(ind, f"pos += {2 if is_str else 4}")
            self.emit(ind, f"if {n} < 0:")
            if nullable:
                self.emit(ind + 1, f"if {n} != -1:")
                self.fail(ind + 2, f"{label}: negative length")
                self.emit(ind + 1, f"{v} = None")
            else:
                self.fail(ind + 1, f"{label}: negative length or null for non-nullable field")
            self.emit(ind, "else:")
        ind += 1
        e = self.var("x")
        self.emit(ind, f"{e} = pos + {n}")
        self.emit(ind, f"if {e} > end:")
        self.fail(ind + 1, f"{label}: length runs past the end of the buffer")
        if is_str:
            self.emit(ind, f"{v} = str(mv[pos:{e}], 'utf-8', 'replace')")
        elif wire == "records":
            self.emit(ind, f"{v} = mv[pos:{e}]")
        else:
            self.emit(ind, f"{v} = bytes(mv[pos:{e}])")
        self.emit(ind, f"pos = {e}")

    def tagged(self, spec: EntitySpec, names: dict[str, str], ind: int, label: str) -> None:
        for f in spec.tagged:
            v = self.var()
            names[f.name] = v
            self.emit(ind, f"{v} = {repr(f.default)}")
        nt, tag, size, stop = self.var("nt"), self.var("tag"), self.var("sz"), self.var("x")
        self.uvarint(nt, ind)
        self.emit(ind, f"if {nt} * 2 > end - pos:")
        self.fail(ind + 1, f"{label}: tagged field count exceeds remaining bytes")
        self.emit(ind, f"for _ in range({nt}):")
        body = ind + 1
        self.uvarint(tag, body)
        self.uvarint(size, body)
        self.emit(body, f"{stop} = pos + {size}")
        self.emit(body, f"if {stop} > end:")
        self.fail(body + 1, f"{label}: tagged field runs past the end of the buffer")
        for i, f in enumerate(spec.tagged):
            self.emit(body, f"{'if' if i == 0 else 'elif'} {tag} == {f.tag}:")
            self.value(f, names[f.name], body + 1, True, f"{label}.{f.name}")
            self.emit(body + 1, f"if pos > {stop}:")
            self.fail(body + 2, f"{label}.{f.name}: tagged field overruns its size")
        self.emit(body, f"pos = {stop}")


def generate_decoder(spec: EntitySpec) -> Decoder:
    g = _DecoderGen()
    g.emit(0, "def decode(buf, pos, mv, end):")
    g.entity(spec, "r", 1, spec.name)
    g.emit(1, "return r, pos")
    fn: Decoder = g.compile("decode", f"decode {spec.name}")
    return fn
