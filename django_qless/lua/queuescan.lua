-- queuescan.lua: which queues a reserve over several queues looks at: the known-empty marks
-- (a queue a pop found drained is skipped without a Redis command until its next timer) and
-- the queue lists held by id (a worker names its queues once, then `@<id>`). Used by pop.lua's
-- reserves and worker.lua's reserve commands (docs/engine.md, "Queue lists held by id").
--
-- Commands: none (helpers loaded with pop).
-- Keys: ql:config `#marks` (the keyspace's generation tag, via Q.generation and
-- Q.pop_config); nothing else: the marks and lists live in the engine's memory.

Q.mod.queuescan = function()
  -- Known-empty marks: K.empty[queue] = { due = d, at = e } says a pop found the queue's work
  -- set empty (drained) and no timer of it due before d (the `#due:<queue>` it stored, at most
  -- HORIZON ahead); `at` is the earliest timer then (exact, or nil if that pop did not scan the
  -- timers). A reserve skips such a queue until d without a Redis command: not even its config
  -- fields are read. The marks live in the engine's memory only (a Redis 7 function keeps K
  -- across calls; under EVALSHA they last one call), so writing, reading and dropping one costs
  -- no Redis command either, on any path. Every engine write that makes a job ready calls
  -- Q.wake, which drops the queue's mark, and Q.lower_due drops it for a new timer; a paused or
  -- full (max-concurrency) queue keeps none. Jobs or timers written by another writer (or a
  -- FLUSHALL, a restore) are seen once d passes: at most HORIZON (1 s) late. A mark more than
  -- HORIZON ahead (a caller's clock moved back) is ignored; a restarted server or a reloaded
  -- library starts with none.
  local MAX_MARKS = 1024
  -- The hidden config field holding the tag of the marks' generation: every pop_config reads
  -- it, and all marks are dropped when it differs from the tag they were made under, so a
  -- FLUSHALL, FLUSHDB or a deleted ql:config ends them at once.
  local MARKS = '#marks'
  Q.MARKS = MARKS

  function Q.set_mark(queue, due, at)
    local marks = K.empty
    if not marks or K.nempty >= MAX_MARKS then
      marks = {}; K.empty = marks; K.nempty = 0
      K.mark_gen = (K.mark_gen or 0) + 1
    end
    -- (written if missing: the first mark, or the keyspace was flushed)
    local tag = Q.generation()
    -- (Q.pop_config dropped the marks of any other tag)
    K.marks_tag = tag
    local m = marks[queue]
    if m then
      m.due, m.at = due, at
      K.mark_gen = (K.mark_gen or 0) + 1  -- (a resume bound may rest on the old due)
    else
      marks[queue] = { due = due, at = at }
      K.nempty = K.nempty + 1
    end
  end

  -- The queue's mark if a reserve may skip the queue now, else nil.
  function Q.known_empty(now, queue)
    local marks = K.empty
    local m = marks and marks[queue]
    if not m or now >= m.due or m.due > now + Q.HORIZON then return nil end
    return m
  end

  function Q.drop_mark(queue)
    local marks = K.empty
    if marks and marks[queue] then marks[queue] = nil; K.mark_gen = (K.mark_gen or 0) + 1 end
  end

  -- The index of the first of `queues` not known to be empty now (#queues + 1 if none).
  -- Remembered on the list table (a held list is the same table on every call: Q.queue_list),
  -- so the next call starts there instead of asking every mark before it again, as long as
  -- no mark of the keyspace was dropped or changed since (K.mark_gen: every drop counts it,
  -- here and in base.lua), the clock did not go back, and the earliest `due` of the skipped
  -- marks is still ahead: then each of them still makes Q.known_empty true.
  function Q.first_open(now, queues)
    local marks = K.empty
    if not marks then return 1 end
    local i, untl = 1, math.huge
    local rs = queues.rs
    if rs and rs.k == K and rs.marks == marks and rs.gen == K.mark_gen and now >= rs.now
        and now < rs.untl then
      i, untl = rs.at, rs.untl
    end
    local n = #queues
    while i <= n do
      local m = Q.known_empty(now, queues[i])
      if not m then break end
      if m.due < untl then untl = m.due end
      i = i + 1
    end
    if not rs then
      if not queues.held then return i end  -- (a list of this call only: nothing to keep)
      rs = {}; queues.rs = rs
    end
    rs.k, rs.marks, rs.gen, rs.at, rs.now, rs.untl = K, marks, K.mark_gen, i, now, untl
    return i
  end

  -- Queue lists held by id, across calls (a Redis 7 function keeps them; under EVALSHA they
  -- last one call): a worker names the same up to 100 queues on every reserve, and sending,
  -- parsing and checking them would be most of what many queues cost a job (docs/engine.md,
  -- "Queue lists held by id"). Names only, nothing read from Redis: a list stays right after
  -- FLUSHALL or in another database; a reloaded library or another server holds none, and the
  -- caller then resends. The caller derives the id from the names (the core client: a hash),
  -- so two callers naming the same id mean the same list.
  local lists, nlists = {}, 0
  local MAX_LISTS = 256
  local AT = string.byte('@')

  -- The queues of reserve, reserve.wait and complete.reserve, from args[first..]: the names;
  -- or `@<id>` and the names (held under id from now on); or `@<id>` alone, the list held
  -- under id, an error if none is (raised before the call writes anything).
  function Q.queue_list(args, first)
    local id = args[first]
    if id and id:byte(1) == AT then
      if #id > 65 or not id:find('^@[%w_%-]+$') then
        Q.fail('Arg "queue" invalid list id: ' .. id:sub(1, 80))
      end
      first = first + 1
      if args[first] == nil then
        local held = lists[id]
        if held then return held end
        Q.fail('queue list ' .. id .. ' is not held: send it with its queues')
      end
    else
      id = nil
    end
    local queues = {}
    for i = first, #args do queues[i - first + 1] = Q.queue(args[i]) end
    if #queues == 0 then Q.fail('Arg "queue" missing') end
    -- (empty queues cost no command once known: the marks above; so a worker names many)
    if #queues > 100 then Q.fail('at most 100 queues') end
    if id then
      if not lists[id] then
        if nlists >= MAX_LISTS then lists, nlists = {}, 0 end
        nlists = nlists + 1
      end
      queues.held = true
      lists[id] = queues  -- (its entries read only from now on; Q.first_open adds `rs`)
    end
    return queues
  end
end
