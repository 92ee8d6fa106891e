"""One job split into N parts that run apart (a Slurm array, indexed jobs) and one run that merges
them: the one rule of which part does what and how parts are named, shared by
create_pretraining_data.py's --num_jobs/--job_id, score.py's and run_rescoring.py's
--num_shards/--shard_id (docs/DESIGN.md §5.6)."""


def part_range(count, part, num_parts):
  """The units of part `part` of `num_parts` over `count` units in their order: a contiguous run,
  [count*part // num_parts, count*(part+1) // num_parts), so the parts tile the units in order and
  differ in size by at most one; the same three numbers give the same range on any machine."""
  return range(count * part // num_parts, count * (part + 1) // num_parts)


def part_name(prefix, part, num_parts):
  """`prefix-0000I-of-0000N`, the name of part I of N."""
  return f"{prefix}-{part:05d}-of-{num_parts:05d}"


def check_part(part, num_parts):
  """ValueError naming --shard_id unless 0 <= part < num_parts (--num_shards)."""
  if not 0 <= part < num_parts:
    raise ValueError(f"--shard_id must be in [0, {num_parts}) (--num_shards), got {part}")
