/* The online softmax player's script (attnlib/views/player.py): the step k -> the online softmax
   after k tiles, computed here from the scores. Python fills in __ID__ (the root element's id) and
   sends the page this file without this comment. */
(function(){
var root=document.getElementById("__ID__");if(!root||root.dataset.ready)return;root.dataset.ready="1";
var D=JSON.parse(root.querySelector(".osp-data").textContent),s=D.s,V=D.v,b=D.b,T=s.length;
var n=Math.ceil(T/b),dv=V?V[0].length:0,k=0;
function $(c){return root.querySelector(c);}
function $$(c){return [].slice.call(root.querySelectorAll(c));}
var back=$(".osp-back"),fwd=$(".osp-forward"),slider=$(".osp-slider"),label=$(".osp-step"),state=$(".osp-state");
var note=$(".osp-note"),fin=$(".osp-final");
function say(w,a){var t=D.text[w];(a||[]).forEach(function(x){t=t.replace("{}",x);});return t;}
function f4(x){return x===-Infinity?"\u2212\u221e":x.toFixed(4);}
function vec(o){return "["+o.map(f4).join(", ")+"]";}
function num(x){return x===-Infinity?"-Infinity":String(x);}
// the online softmax: m, l and o after the first `steps` tiles, and the last tile's update
function run(steps){
  var m=-Infinity,l=0,o=[],st={m0:-Infinity,l0:0,f:NaN,sum:0};for(var c=0;c<dv;c++)o.push(0);
  for(var t=0;t<steps;t++){
    var lo=t*b,hi=Math.min(lo+b,T),mt=-Infinity,j;
    for(j=lo;j<hi;j++)if(s[j]>mt)mt=s[j];
    var mn=Math.max(m,mt),f=Math.exp(m-mn),sum=0;
    for(c=0;c<dv;c++)o[c]*=f;
    for(j=lo;j<hi;j++){var p=Math.exp(s[j]-mn);sum+=p;for(c=0;c<dv;c++)o[c]+=p*V[j][c];}
    st={m0:m,l0:l,f:f,sum:sum};l=f*l+sum;m=mn;
  }
  st.m=m;st.l=l;st.o=o;return st;
}
function draw(){
  var r=run(k),w=s.map(function(x,j){return j<k*b?Math.exp(x-r.m)/r.l:null;});
  slider.value=String(k);label.textContent=say("step",[k,n]);
  back.setAttribute("aria-disabled",String(k===0));fwd.setAttribute("aria-disabled",String(k===n));
  $$(".osp-tile").forEach(function(h,t){var now=t===k-1,seen=t<k-1;
    h.className="osp-tile "+(now?"osp-now":seen?"osp-seen":"osp-unread");
    h.querySelector(".osp-status").textContent=D.text[now?"now":seen?"read":"unread"];});
  $$(".osp-row tbody tr").forEach(function(row){var wr=row.classList.contains("osp-wrow");
    [].forEach.call(row.querySelectorAll("td"),function(e,j){var t=Math.floor(j/b);
      e.className=t===k-1?"osp-now":t<k-1?"osp-seen":"osp-unread";
      if(wr)e.textContent=w[j]===null?"\u2014":w[j].toFixed(4);});});
  $(".osp-m").textContent=k===0?"\u2212\u221e":f4(r.m0)+" \u2192 "+f4(r.m);
  $(".osp-factor").textContent=k===0?"\u2014":f4(r.f);
  $(".osp-l").textContent=k===0?"0":f4(r.f)+" \u00d7 "+f4(r.l0)+" + "+f4(r.sum)+" = "+f4(r.l);
  if(V)$(".osp-o").textContent=vec(r.o);
  var grew=k>1&&r.m>r.m0;
  note.textContent=say(k===0?"start":k===1?"first":grew?"grew":"same");
  note.className="osp-note"+(grew?" osp-new":"");note.dataset.rescaled=String(grew);
  state.dataset.step=String(k);state.dataset.m=num(r.m);state.dataset.l=num(r.l);
  state.dataset.factor=k===0?"NaN":num(r.f);state.dataset.w=JSON.stringify(w);state.dataset.o=V?JSON.stringify(r.o):"null";
  fin.hidden=k!==n;
  if(k===n){
    var diff=0,out=V?r.o.map(function(x){return x/r.l;}):null;
    $$(".osp-fk tr").forEach(function(row,j){var d=Math.abs(w[j]-D.softmax[j]);diff=Math.max(diff,d);
      row.cells[1].textContent=w[j].toFixed(4);var mk=row.cells[3];mk.textContent=d<=D.tol?"= \u2713":"\u2260 \u2717";mk.className="osp-mark "+(d<=D.tol?"osp-ok":"osp-bad");});
    if(V){var dout=0;out.forEach(function(x,c){dout=Math.max(dout,Math.abs(x-D.out[c]));});diff=Math.max(diff,dout);
      $(".osp-out").textContent=vec(out);var mo=$(".osp-mark-out");mo.textContent=dout<=D.tol?"= \u2713":"\u2260 \u2717";
      mo.className="osp-mark-out "+(dout<=D.tol?"osp-ok":"osp-bad");}
    var ok=diff<=D.tol,v=$(".osp-verdict");
    v.textContent=(ok?"\u2713 ":"\u2717 ")+say(ok?"equal":"different")+" ("+say("diff")+" "+diff.toExponential(1)+(ok?" \u2264 ":" > ")+"1e-6)";
    v.className="osp-verdict "+(ok?"osp-ok":"osp-bad");
    fin.dataset.final=JSON.stringify(w);fin.dataset.out=V?JSON.stringify(out):"null";fin.dataset.maxDiff=String(diff);fin.dataset.equal=String(ok);
  }
}
function go(to){k=Math.max(0,Math.min(n,to));draw();}
back.addEventListener("click",function(){go(k-1);});
fwd.addEventListener("click",function(){go(k+1);});
slider.addEventListener("input",function(){go(+slider.value);});
root.addEventListener("keydown",function(e){
  if(e.target===slider)return;  // the slider moves itself with the arrow keys
  var to={ArrowRight:k+1,ArrowDown:k+1,ArrowLeft:k-1,ArrowUp:k-1,Home:0,End:n}[e.key];
  if(to!==undefined){e.preventDefault();go(to);}
});
draw();
})();
