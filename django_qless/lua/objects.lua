-- objects.lua: job objects as replies, and job history read back.
--
-- Commands: none (helpers only).
-- Keys:
--   ql:j:<jid>                     hash  (HMGET)
--   ql:j:<jid>-history             list  (LRANGE)
--   ql:j:<jid>-dependents|dependencies  set (SMEMBERS)
--   ql:tracked                     zset  (ZSCORE, for `get`)

Q.mod.objects = function()
  -- History objects: the first visit's (`visit` field, or the implied put when the job has
  -- no history stored at all; history.lua), the list's, then the legacy field's. `compact`
  -- ({put time, queue, pop time, worker}, from a pop that just wrote `visit`) means there is
  -- no list to read: the two objects are built as the list form decodes them.
  function Q.read_history(jid, h)
    local compact = h.compact
    if compact then
      local put = { when = compact[1], what = 'put' }
      put.q = compact[2]
      local popped = { when = compact[3], what = 'popped' }
      popped.worker = compact[4]
      return { put, popped }
    end
    local out = {}
    local legacy = h.history
    if legacy == '[]' then legacy = nil end
    -- `listed`: the list's whole content, known from the RPUSH that created it.
    local raws = h.listed or rcall('LRANGE', Q.khist(jid), 0, -1)
    if h.visit or (not legacy and #raws == 0) then
      local front = Q.visit_entries(h.visit, h.time, h.queue)
      for _, e in ipairs(raws) do tinsert(front, e) end
      raws = front
    end
    if legacy then
      for _, e in ipairs(Q.legacy_entries(legacy)) do tinsert(raws, e) end
    end
    for _, raw in ipairs(raws) do
      local ok, e = pcall(cjson_decode, raw)
      if ok and type(e) == 'table' then
        if e[2] ~= nil then
          local obj = { when = e[1], what = e[2] }
          if type(e[3]) == 'table' then
            for k, v in pairs(e[3]) do obj[k] = v end
          end
          tinsert(out, obj)
        else
          tinsert(out, e)
        end
      end
    end
    return out
  end


  -- Build the JSON-ready job object from a hash read with Q.ALL (lean: no history/deps).
  -- Reads never migrate a legacy/compact `history` field: they expand it after the list.
  function Q.job_object(jid, h, tracked, lean)
    local failure = {}
    if h.failure and h.failure ~= '' and h.failure ~= '{}' then
      local ok, f = pcall(cjson_decode, h.failure)
      if ok and type(f) == 'table' then failure = f end
    end
    -- (a lean record has no `remaining` while it equals `retries`)
    local remaining = tonumber(h.remaining) or tonumber(h.retries) or 0
    local obj = {
      jid = jid,
      klass = h.klass or '',
      state = h.state or '',
      queue = h.queue or '',
      worker = h.worker or '',
      tracked = tracked,
      priority = tonumber(h.priority) or 0,
      expires = tonumber(h.expires) or 0,
      retries = tonumber(h.retries) or 0,
      remaining = floor(remaining),
      data = h.data or '{}',
      -- (the empty forms every job has, without a call to Q.list)
      tags = (h.tags == nil or h.tags == '{}' or h.tags == '[]') and {} or Q.list(h.tags),
      failure = failure,
      spawned_from_jid = h.spawned_from_jid or false,
    }
    -- Throttles only when the job has some: qless-core's job objects have no such field
    -- (and cjson would write an empty list as `{}`).
    if h.throttles ~= nil and h.throttles ~= '[]' and h.throttles ~= '{}' and h.throttles ~= '' then
      local throttles = Q.list(h.throttles)
      if #throttles > 0 then obj.throttles = throttles end
    end
    if not lean then
      obj.history = Q.read_history(jid, h)
      -- Most jobs have neither set: one EXISTS instead of two SMEMBERS.
      local empty = {}
      obj.dependents, obj.dependencies = empty, empty
      if rcall('EXISTS', Q.kdents(jid), Q.kdeps(jid)) > 0 then
        obj.dependents = rcall('SMEMBERS', Q.kdents(jid))
        obj.dependencies = rcall('SMEMBERS', Q.kdeps(jid))
      end
    end
    return obj
  end

  -- The worker's calls (reserve, reserve.wait, complete.reserve) reply with a flat array
  -- instead of JSON: a header, then one entry per job holding its 13 stored texts as they
  -- are (docs/engine.md, "The worker's replies"). The client derives what
  -- `job_object` would (defaults, numbers as cjson prints them with %.14g, the list forms of
  -- tags and throttles), so building the Lua table and its cjson encode are saved. The
  -- header's first entry names the shape: a client that does not know it refuses the reply.
  Q.REPLY_SHAPE = 'qless-flat-2'
  local SEP = '\31'  -- (unit separator: JSON text and validated names hold none)
  local find = string.find

  -- A reply's header: shape, state of the completed job ('' for none), wake ('' while jobs
  -- follow; set by the caller), the worker every job in the reply is running for.
  function Q.flat_reply(state, worker)
    return { Q.REPLY_SHAPE, state or '', '', worker }
  end

  -- Append a running job's entry to a flat reply (state 'running' and the worker are the
  -- header's). `expires`: the lock expiry as text. The entry is one string, the fields
  -- joined by SEP (one concatenation: ~3k instructions a job fewer than a reply element per
  -- field), or, when a field holds SEP itself, an array of the fields.
  function Q.job_fields(out, jid, h, tracked, expires)
    local remaining = h.remaining
    -- (a pop that spent a retry holds it as a number: %.14g, as cjson would print it)
    if type(remaining) == 'number' then remaining = tostring(remaining) end
    local klass, queue, data, priority = h.klass or '', h.queue or '', h.data or '{}',
      h.priority or ''
    local tags, retries, failure, throttles = h.tags or '', h.retries or '', h.failure or '',
      h.throttles or ''
    local spawned, mark = h.spawned_from_jid or '', tracked and '1' or ''
    remaining, expires = remaining or '', expires or ''
    if find(jid .. klass .. queue .. expires .. data .. priority .. tags .. retries
        .. remaining .. failure .. throttles .. spawned, SEP, 1, true) then
      out[#out + 1] = { jid, klass, queue, expires, data, priority, tags, retries, remaining,
        failure, mark, throttles, spawned }
    else
      out[#out + 1] = jid .. SEP .. klass .. SEP .. queue .. SEP .. expires .. SEP .. data
        .. SEP .. priority .. SEP .. tags .. SEP .. retries .. SEP .. remaining .. SEP
        .. failure .. SEP .. mark .. SEP .. throttles .. SEP .. spawned
    end
  end

  -- Full job object for a jid, or nil.
  function Q.get(jid)
    local h = Q.read(jid, Q.ALL)
    if not h then return nil end
    return Q.job_object(jid, h, Q.tracked(jid), false)
  end
end
