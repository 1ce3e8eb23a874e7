/* The live model's script (attnlib/views/live.py): decode the weights, read the prompt, generate,
   run once more for the weights, show them in the explorer. Python fills in __ID__ (the root
   element's id) and __EXPLORER__ (explore.js's attnx function) and sends the page this file
   without this comment. */
(function(){
var root=document.getElementById("__ID__");if(!root||root.dataset.ready)return;root.dataset.ready="1";
__EXPLORER__
var D=JSON.parse(root.querySelector(".attnl-data").textContent),S=D.spec;
var input=root.querySelector(".attnl-in"),msg=root.querySelector(".attnl-msg"),res=root.querySelector(".attnl-result");
var view=root.querySelector(".attnl-view"),viewTitle=root.querySelector(".attnl-view-title");
var tmpl=root.querySelector(".attnl-template");
msg.textContent="";msg.classList.remove("attnl-still");msg.removeAttribute("data-i18n");
var bin=atob(D.blob),bytes=new Uint8Array(bin.length);for(var i=0;i<bin.length;i++)bytes[i]=bin.charCodeAt(i);
var dv=new DataView(bytes.buffer),P={};
D.names.forEach(function(e){var n=e[2].reduce(function(a,b){return a*b;},1),a=new Float64Array(n);
  for(var i=0;i<n;i++)a[i]=dv.getFloat32(4*(e[1]+i),true);P[e[0]]=a;});
function get(name,n){return P[name]||new Float64Array(n);}
function lin(x,W,b,nOut){var nIn=x.length,y=new Float64Array(nOut);
  for(var o=0;o<nOut;o++){var s=b?b[o]:0,r=o*nIn;for(var i=0;i<nIn;i++)s+=W[r+i]*x[i];y[o]=s;}return y;}
function ln(x,w,b){var n=x.length,m=0,v=0,y=new Float64Array(n),i;for(i=0;i<n;i++)m+=x[i];m/=n;
  for(i=0;i<n;i++)v+=(x[i]-m)*(x[i]-m);v/=n;var r=1/Math.sqrt(v+S.eps);
  for(i=0;i<n;i++)y[i]=(x[i]-m)*r*w[i]+b[i];return y;}
function gelu(u){var c=Math.sqrt(2/Math.PI);return u.map(function(z){return 0.5*z*(1+Math.tanh(c*(z+0.044715*z*z*z)));});}
function forward(ids){
  var T=ids.length,d=S.d_model,H=S.n_heads,dh=S.d_head,dq=H*dh,x=[],weights=[],t,i,j,h,c;
  var E=P["tok_emb.weight"],Pos=P["pos_emb.weight"];
  for(t=0;t<T;t++){var r=new Float64Array(d);for(c=0;c<d;c++)r[c]=E[ids[t]*d+c]+Pos[t*d+c];x.push(r);}
  for(var l=0;l<S.n_layers;l++){
    var p="blocks."+l+".",a=p+"attn.";
    var hs=x.map(function(r){return ln(r,P[p+"ln1.weight"],get(p+"ln1.bias",d));});
    var q=hs.map(function(r){return lin(r,P[a+"w_q.weight"],P[a+"w_q.bias"],dq);});
    var k=hs.map(function(r){return lin(r,P[a+"w_k.weight"],P[a+"w_k.bias"],dq);});
    var v=hs.map(function(r){return lin(r,P[a+"w_v.weight"],P[a+"w_v.bias"],dq);});
    var y=x.map(function(){return new Float64Array(dq);}),W=[];
    for(h=0;h<H;h++){var Wh=[];
      for(i=0;i<T;i++){var s=new Float64Array(T),mx=-Infinity,z=0;
        for(j=0;j<=i;j++){var dot=0;for(c=0;c<dh;c++)dot+=q[i][h*dh+c]*k[j][h*dh+c];s[j]=dot/Math.sqrt(dh);
          if(s[j]>mx)mx=s[j];}
        for(j=0;j<=i;j++){s[j]=Math.exp(s[j]-mx);z+=s[j];}
        for(j=0;j<T;j++)s[j]=j<=i?s[j]/z:0;
        for(j=0;j<=i;j++)for(c=0;c<dh;c++)y[i][h*dh+c]+=s[j]*v[j][h*dh+c];
        Wh.push(Array.prototype.slice.call(s));}
      W.push(Wh);}
    weights.push(W);
    for(t=0;t<T;t++){var o=lin(y[t],P[a+"w_o.weight"],P[a+"w_o.bias"],d);for(c=0;c<d;c++)x[t][c]+=o[c];}
    for(t=0;t<T;t++){var g=ln(x[t],P[p+"ln2.weight"],get(p+"ln2.bias",d));
      var m=lin(gelu(lin(g,P[p+"mlp.0.weight"],P[p+"mlp.0.bias"],S.d_ff)),P[p+"mlp.2.weight"],P[p+"mlp.2.bias"],d);
      for(c=0;c<d;c++)x[t][c]+=m[c];}
  }
  var last=ln(x[T-1],P["ln_f.weight"],get("ln_f.bias",d));
  var logits=lin(last,S.tied?E:P["lm_head.weight"],null,S.vocab_size);
  return {logits:logits,weights:weights};
}
function argmax(a){var b=0;for(var i=1;i<a.length;i++)if(a[i]>a[b])b=i;return b;}
function fill(t,o){return t.replace(/\{(\w+)\}/g,function(_,k){return o[k];});}
function parse(text){
  var toks=D.single?text.replace(/\s+/g,"").split(""):text.trim().split(/\s+/).filter(Boolean),ids=[];
  for(var i=0;i<toks.length;i++){var id=D.vocab.indexOf(toks[i]);
    if(id<0)return {error:"unknown",text:fill(D.text.unknown,{token:toks[i]})};ids.push(id);}
  if(ids.length!==D.prompt)return {error:"count",text:fill(D.text.count,{n:D.prompt,got:ids.length})};
  return {ids:ids};
}
function toks(ids,from){return ids.map(function(id,i){var e=document.createElement("span");e.className="attnl-tok";
  e.dataset.id=id;e.dataset.pos=from+i;e.textContent=D.vocab[id];return e.outerHTML;}).join(" ");}
function run(){
  var got=parse(input.value);
  if(got.error){msg.textContent=got.text;msg.dataset.error=got.error;input.setAttribute("aria-invalid","true");return;}
  msg.textContent="";msg.dataset.error="";input.removeAttribute("aria-invalid");
  var ids=got.ids.slice();
  for(var s=0;s<D.new;s++)ids.push(argmax(forward(ids).logits));
  var w=forward(ids).weights,T=ids.length;
  res.querySelector(".attnl-prompt").innerHTML=toks(ids.slice(0,D.prompt),0);
  res.querySelector(".attnl-answer").innerHTML=toks(ids.slice(D.prompt),D.prompt);
  res.dataset.ids=JSON.stringify(ids);res.dataset.weights=JSON.stringify(w);res.hidden=false;viewTitle.hidden=false;
  var n=+root.dataset.runs+1,ex=document.importNode(tmpl.content,true).firstElementChild,id=root.id+"-x"+n;
  [].slice.call(ex.querySelectorAll("script:not([type])")).forEach(function(e){e.remove();});
  ex.id=id;
  var data=ex.querySelector(".attnx-data"),X=JSON.parse(data.textContent),labels=ids.map(function(i){return D.vocab[i];});
  X.w=[w.map(function(L){return L.map(function(Hh){return Hh.map(function(row){
    return row.map(function(v){return Math.min(X.scale,Math.max(0,Math.round(v*X.scale)));});});});})];
  data.textContent=JSON.stringify(X);
  [].slice.call(ex.querySelectorAll(".attnx-q")).forEach(function(e,i){e.textContent=labels[i];e.title=labels[i];});
  [].slice.call(ex.querySelectorAll(".attnx-k")).forEach(function(e,i){e.lastChild.textContent=" "+labels[i];
    e.title=labels[i];});
  [].slice.call(ex.querySelectorAll(".attnx-table thead th")).slice(1).forEach(function(e,i){e.textContent=labels[i];});
  view.innerHTML="";view.appendChild(ex);attnx(id);root.dataset.runs=String(n);
}
root.querySelector(".attnl-form").addEventListener("submit",function(e){e.preventDefault();run();});
if(input.value)run();
})();
